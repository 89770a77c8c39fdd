"""Probe, under torchrun only: what each snapshot holds, which snapshot a
restarted worker loaded, and the optimizer's state when training resumed.

A snapshot is judged as it is on disk: right after torch.save returns, the
file is loaded back and its parts are summarised (content hashes, so a
save and a later load of the same snapshot can be matched, however the
file was renamed in between).
"""

import copy
import os
from collections.abc import Mapping

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ...model_state import find_model_state
from . import fingerprint
from .checkpoint import plain_model_for
from .state import RankState, wraps

MAX_SUMMARISED = 50  # snapshots summarised per worker: far more than a run's epochs


def _optimizer_state(obj):
    """The optimizer's state_dict inside a snapshot: a dict with 'state' and 'param_groups'."""
    if isinstance(obj, Mapping):
        for value in obj.values():
            if isinstance(value, Mapping) and "state" in value and "param_groups" in value:
                return value
    return None


def _epoch(obj) -> int | None:
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if "epoch" in str(key).lower() and isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _loads_strictly(state: RankState, model_state) -> str:
    """'' when the model state loads into the plain model with strict=True; else why not."""
    model = plain_model_for(state, model_state)
    if model is None:
        return "no model was found to load it into"
    try:
        copy.deepcopy(model).load_state_dict(model_state, strict=True)
    except Exception as error:  # the error names the missing or unexpected keys
        return str(error).splitlines()[0][:500]
    return ""


def summary(obj) -> dict:
    model_state, optimizer = find_model_state(obj), _optimizer_state(obj)
    return {
        "model_state": fingerprint.content(model_state) if model_state is not None else None,
        "optimizer_state": fingerprint.content(optimizer["state"]) if optimizer is not None else None,
    }


def _summarise_save(state: RankState, target: str | None, load) -> None:
    if target is None or not os.path.exists(target):
        state.record(
            "snapshot_saved",
            path=target,
            passes_finished=state.extras.get("passes_finished", 0),
            load_problem="it was saved to a file object, or the file was gone right after torch.save",
        )
        return
    on_disk = load(target, map_location="cpu", weights_only=False)
    model_state = find_model_state(on_disk)
    state.record(
        "snapshot_saved",
        path=target,
        passes_finished=state.extras.get("passes_finished", 0),
        epoch=_epoch(on_disk),
        load_problem=_loads_strictly(state, model_state) if model_state is not None else "no model state",
        **summary(on_disk),
    )


def install(state: RankState) -> None:
    if state.launcher != "torchrun":
        return
    saved = [0]
    original_save, original_load = torch.save, torch.load

    @wraps(original_save)
    def save(obj, f, *args, **kwargs):
        result = original_save(obj, f, *args, **kwargs)
        if saved[0] < MAX_SUMMARISED:
            saved[0] += 1
            target = os.path.realpath(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else None
            state.guarded(_summarise_save, state, target, original_load)
        return result

    @wraps(original_load)
    def load(f, *args, **kwargs):
        obj = original_load(f, *args, **kwargs)
        state.guarded(lambda: state.record("snapshot_loaded", **summary(obj)))
        return obj

    first = [True]

    def before_first_step(optimizer, _args, _kwargs):
        if first[0]:
            first[0] = False
            live = optimizer.state_dict()["state"]
            state.record("optimizer_at_start", state=fingerprint.content(live) if live else None)

    torch.save = torch.serialization.save = save
    torch.load = torch.serialization.load = load
    register_optimizer_step_pre_hook(lambda *a: state.guarded(before_first_step, *a))

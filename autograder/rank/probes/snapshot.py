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
from .checkpoint import CheckpointProbe
from .state import Probe, RankState, wraps

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


def summary(obj) -> dict:
    model_state, optimizer = find_model_state(obj), _optimizer_state(obj)
    return {
        "model_state": fingerprint.content(model_state) if model_state is not None else None,
        "optimizer_state": fingerprint.content(optimizer["state"]) if optimizer is not None else None,
    }


class SnapshotProbe(Probe):
    def __init__(self, state: RankState, checkpoint: CheckpointProbe):
        super().__init__(state)
        self.checkpoint = checkpoint  # knows which plain model a saved state belongs to
        self.summarised = 0
        self.resumed = False  # the optimizer's state at the first step is recorded

    def install(self) -> None:
        if self.state.launcher != "torchrun":
            return
        probe, state = self, self.state
        original_save, original_load = torch.save, torch.load

        @wraps(original_save)
        def save(obj, f, *args, **kwargs):
            result = original_save(obj, f, *args, **kwargs)
            if probe.summarised < MAX_SUMMARISED:
                probe.summarised += 1
                target = os.path.realpath(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else None
                state.guarded(probe.summarise_save, target, original_load)
            return result

        @wraps(original_load)
        def load(f, *args, **kwargs):
            obj = original_load(f, *args, **kwargs)
            state.guarded(lambda: state.record("snapshot_loaded", **summary(obj)))
            return obj

        torch.save = torch.serialization.save = save
        torch.load = torch.serialization.load = load
        register_optimizer_step_pre_hook(lambda *a: state.guarded(self.before_first_step, *a))

    def summarise_save(self, target: str | None, load) -> None:
        state = self.state
        if target is None or not os.path.exists(target):
            state.record(
                "snapshot_saved",
                path=target,
                passes_finished=state.passes_finished,
                load_problem="it was saved to a file object, or the file was gone right after torch.save",
            )
            return
        on_disk = load(target, map_location="cpu", weights_only=False)
        model_state = find_model_state(on_disk)
        state.record(
            "snapshot_saved",
            path=target,
            passes_finished=state.passes_finished,
            epoch=_epoch(on_disk),
            load_problem=self.loads_strictly(model_state) if model_state is not None else "no model state",
            **summary(on_disk),
        )

    def loads_strictly(self, model_state) -> str:
        """'' when the model state loads into the plain model with strict=True; else why not."""
        model = self.checkpoint.plain_model_for(model_state)
        if model is None:
            return "no model was found to load it into"
        try:
            copy.deepcopy(model).load_state_dict(model_state, strict=True)
        except Exception as error:  # the error names the missing or unexpected keys
            return str(error).splitlines()[0][:500]
        return ""

    def before_first_step(self, optimizer, _args, _kwargs) -> None:
        if not self.resumed:
            self.resumed = True
            live = optimizer.state_dict()["state"]
            self.state.record("optimizer_at_start", state=fingerprint.content(live) if live else None)

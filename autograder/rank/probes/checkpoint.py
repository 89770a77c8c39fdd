"""Probe: torch.save calls, and whether the last saved model state loads into
the plain (unwrapped) model with strict=True.

torch.save opens its file in C++, so no Python audit hook sees it: the
function itself is wrapped.
"""

import collections
import copy
import os

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ...model_state import find_model_state
from . import ddp
from .state import Probe, RankState, wraps


def _target_name(f) -> str | None:
    if isinstance(f, (str, os.PathLike)):
        return os.path.realpath(os.fspath(f))
    name = getattr(f, "name", None)
    return os.path.realpath(name) if isinstance(name, str) else None


class CheckpointProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        # Which module produced each recent state dict, so a saved state can be
        # loaded back into the right plain model. Bounded: only recent ones matter.
        self.producers: collections.OrderedDict[int, tuple] = collections.OrderedDict()
        self.depth = 0  # state_dict calls in progress: a module's calls its children's
        self.saves: list[tuple[str | None, object]] = []

    def install(self) -> None:
        probe, state = self, self.state
        original_state_dict = nn.Module.state_dict

        @wraps(original_state_dict)
        def state_dict(self, *args, **kwargs):
            probe.depth += 1
            try:
                result = original_state_dict(self, *args, **kwargs)
            finally:
                probe.depth -= 1
            if probe.depth == 0:
                probe.producers[id(result)] = (result, self)
                while len(probe.producers) > 8:
                    probe.producers.popitem(last=False)
            return result

        original_save = torch.save

        @wraps(original_save)
        def save(obj, f, *args, **kwargs):
            target = _target_name(f)
            state.record("torch_save", path=target)
            probe.saves.append((target, obj))
            return original_save(obj, f, *args, **kwargs)

        nn.Module.state_dict = state_dict
        torch.save = torch.serialization.save = save

    def plain_model_for(self, model_state):
        """The unwrapped module that produced this state dict; else the last one DDP wrapped."""
        entry = self.producers.get(id(model_state))
        module = entry[1] if entry is not None and entry[0] is model_state else ddp.last_wrapped_module(self.state)
        if isinstance(module, DistributedDataParallel):
            module = module.module
        return module

    def load_back(self) -> dict:
        target, obj = self.saves[-1]
        saved_state = find_model_state(obj)
        if saved_state is None:
            return {
                "path": target,
                "ok": False,
                "problem": "whole_module" if isinstance(obj, nn.Module) else "no_model_state",
            }
        model = self.plain_model_for(saved_state)
        if model is None:
            return {"path": target, "ok": False, "problem": "no_model"}
        if target and os.path.exists(target):  # judge the file as it is on disk
            try:
                saved_state = find_model_state(torch.load(target, map_location="cpu", weights_only=False))
            except Exception:  # another rank may be writing the same file right now
                pass
        if saved_state is None:
            return {"path": target, "ok": False, "problem": "no_model_state"}
        try:
            copy.deepcopy(model).load_state_dict(saved_state, strict=True)
        except Exception as error:  # the error text names the missing/unexpected keys
            return {
                "path": target,
                "ok": False,
                "problem": "strict_load",
                "error": str(error)[:2000],
                "model": type(model).__name__,
            }
        return {"path": target, "ok": True, "model": type(model).__name__}

    def finish(self) -> None:
        if self.saves:
            loaded = self.state.guarded(self.load_back) or {"ok": False, "problem": "probe_error"}
            self.state.record("checkpoint_load", **loaded)

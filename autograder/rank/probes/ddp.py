"""Probe: each DistributedDataParallel wrapper, where its module lives, and
whether its forward (the part that makes gradients get averaged) ran."""

import torch
from torch.nn.parallel import DistributedDataParallel

from .state import Probe, RankState, wraps


def _devices(module) -> list[str]:
    return sorted({str(p.device) for p in module.parameters()})


class DdpProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.forward_calls: dict[int, int] = {}  # the wrapper's number -> its forwards

    def install(self) -> None:
        probe, state = self, self.state
        original_init = DistributedDataParallel.__init__

        @wraps(original_init)
        def __init__(self, module, *args, **kwargs):
            state.record("ddp_created", devices=state.guarded(_devices, module))
            original_init(self, module, *args, **kwargs)
            # A strong reference: the checkpoint probe needs the module after main has returned and dropped its own.
            state.ddp_modules.append(module)
            number = len(state.ddp_modules) - 1
            probe.forward_calls[number] = 0
            self.register_forward_pre_hook(lambda ddp_model, _inputs: probe.count_forward(number, ddp_model))

        DistributedDataParallel.__init__ = __init__

    def count_forward(self, number: int, ddp_model) -> None:
        self.forward_calls[number] += 1
        if torch.is_grad_enabled() and getattr(ddp_model, "require_backward_grad_sync", True):
            self.state.ddp_forward_ready = True

    def finish(self) -> None:
        self.state.record("ddp_forward_calls", calls=self.forward_calls)


def wrapped_parameter_ids(state: RankState) -> set[int]:
    return {id(p) for module in state.ddp_modules for p in module.parameters()}


def last_wrapped_module(state: RankState):
    return state.ddp_modules[-1] if state.ddp_modules else None

"""Probe: how each step's gradients were synchronised, and what the first step applied.

A step counts as averaged by DDP when a DDP forward in training (gradients
on, not under no_sync) came before it: that forward readies DDP's reducer
for the backward. It counts as averaged by hand when an all_reduce of a
gradient came before it. The first step's gradients are also kept twice:
this rank's own, as its backward produced them (a hook on each parameter
sees them before DDP or anything else changes them), and the one the
optimizer applied. The judge compares the applied one with the mean of the
ranks' own ones: an average, not one rank's gradient or a sum.
"""

import functools

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.optim import Optimizer

from . import fingerprint
from .state import Probe, RankState, wraps


class GradientsProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.reduced: list[tuple[int, int]] = []  # (data pointer, size) of each all_reduce since the last step
        self.local: dict[int, torch.Tensor] = {}  # id(parameter) -> its own gradient, until the first step
        self.hooks: list = []

    def install(self) -> None:
        probe, state = self, self.state
        original_init = Optimizer.__init__

        @wraps(original_init)
        def __init__(self, params, *args, **kwargs):
            original_init(self, params, *args, **kwargs)
            if state.steps == 0:
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.requires_grad:
                            probe.hooks.append(p.register_hook(functools.partial(probe.keep_local, p)))

        original_all_reduce = dist.all_reduce

        @wraps(original_all_reduce)
        def all_reduce(tensor, *args, **kwargs):
            if isinstance(tensor, torch.Tensor) and len(probe.reduced) < 10_000:
                probe.reduced.append((tensor.data_ptr(), tensor.numel()))
            return original_all_reduce(tensor, *args, **kwargs)

        Optimizer.__init__ = __init__
        for module in (dist, c10d):
            module.all_reduce = all_reduce

    def keep_local(self, parameter, grad) -> None:
        if self.state.steps == 0:
            key = id(parameter)
            self.local[key] = grad.detach().clone() if key not in self.local else self.local[key] + grad.detach()

    def step_sync(self, params) -> str | None:
        """How the gradients of the step about to be taken were synchronised:
        "ddp", "all_reduce" or None. Clears the marks for the next step."""
        if self.state.ddp_forward_ready:
            how = "ddp"
        else:
            how = "all_reduce" if self.reduced and _reduced_a_gradient(self.reduced, params) else None
        self.state.ddp_forward_ready, self.reduced = False, []
        return how

    def first_step_gradients(self, params) -> tuple[list[float], list[float]]:
        """(this rank's own gradient, the applied gradient) as fingerprints. Stops keeping local gradients."""
        own = [self.local.get(id(p), torch.zeros_like(p)) for p in params]
        applied = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()
        self.local.clear()
        return fingerprint.parameters(own), fingerprint.parameters(applied)


def _reduced_a_gradient(reduced: list[tuple[int, int]], params) -> bool:
    grads = [p.grad for p in params if p.grad is not None]
    pointers = {g.data_ptr() for g in grads}
    sizes = {g.numel() for g in grads} | {sum(g.numel() for g in grads)}  # one gradient, or all flattened
    return any(pointer in pointers or size in sizes for pointer, size in reduced)

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
from .state import RankState, wraps


def install(state: RankState) -> None:
    marks = state.extras["sync_marks"] = {"ddp": False, "reduced": []}
    local = state.extras["local_gradients"] = {}  # id(parameter) -> its gradient, until the first step
    hooks = state.extras["local_gradient_hooks"] = []

    def keep_local(parameter, grad):
        if state.steps == 0:
            key = id(parameter)
            local[key] = grad.detach().clone() if key not in local else local[key] + grad.detach()

    original_init = Optimizer.__init__

    @wraps(original_init)
    def __init__(self, params, *args, **kwargs):
        original_init(self, params, *args, **kwargs)
        if state.steps == 0:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        hooks.append(p.register_hook(functools.partial(keep_local, p)))

    original_all_reduce = dist.all_reduce

    @wraps(original_all_reduce)
    def all_reduce(tensor, *args, **kwargs):
        if isinstance(tensor, torch.Tensor) and len(marks["reduced"]) < 10_000:
            marks["reduced"].append((tensor.data_ptr(), tensor.numel()))
        return original_all_reduce(tensor, *args, **kwargs)

    Optimizer.__init__ = __init__
    for module in (dist, c10d):
        module.all_reduce = all_reduce


def mark_ddp_forward(state: RankState, ddp_model) -> None:
    """Called by the DDP probe before each DDP forward."""
    if torch.is_grad_enabled() and getattr(ddp_model, "require_backward_grad_sync", True):
        state.extras["sync_marks"]["ddp"] = True


def step_sync(state: RankState, params) -> str | None:
    """How the gradients of the step about to be taken were synchronised:
    "ddp", "all_reduce" or None. Clears the marks for the next step."""
    marks = state.extras["sync_marks"]
    how = "ddp" if marks["ddp"] else "all_reduce" if marks["reduced"] and _reduced_a_gradient(marks, params) else None
    marks["ddp"], marks["reduced"] = False, []
    return how


def _reduced_a_gradient(marks: dict, params) -> bool:
    grads = [p.grad for p in params if p.grad is not None]
    pointers = {g.data_ptr() for g in grads}
    sizes = {g.numel() for g in grads} | {sum(g.numel() for g in grads)}  # one gradient, or all flattened
    return any(pointer in pointers or size in sizes for pointer, size in marks["reduced"])


def first_step_gradients(state: RankState, params) -> tuple[list[float], list[float]]:
    """(this rank's own gradient, the applied gradient) as fingerprints. Stops keeping local gradients."""
    local = state.extras["local_gradients"]
    own = [local.get(id(p), torch.zeros_like(p)) for p in params]
    applied = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    for hook in state.extras["local_gradient_hooks"]:
        hook.remove()
    state.extras["local_gradient_hooks"].clear()
    local.clear()
    return fingerprint.parameters(own), fingerprint.parameters(applied)

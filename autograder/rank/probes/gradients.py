"""Probe: how each step's gradients were synchronised, and what the sampled steps applied.

A step counts as averaged by DDP when a DDP forward in training (gradients
on, not under no_sync) came before it: that forward readies DDP's reducer
for the backward. It counts as averaged by hand when an all_reduce of a
gradient came before it. At every sampled step the gradients are also kept
twice: this rank's own, as its backwards produced them (a hook on each
parameter sees them before DDP or anything else changes them), and the one
the optimizer applied; with them, the constant factor each backward's loss
was scaled by (loss / world_size). The judge compares the applied gradient
with the mean of the ranks' own ones: an average, not one rank's gradient
or a sum, whichever way the code averaged.
"""

import functools

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.optim import Optimizer

from . import fingerprint
from .state import Probe, RankState, is_sampled_step, wraps

MAX_SCALES = 100  # backwards per step whose loss scale is kept


class GradientsProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.reduced: list[tuple[int, int]] = []  # (data pointer, size) of each all_reduce since the last step
        self.local: dict[int, torch.Tensor] = {}  # id(parameter) -> its own gradient, in a sampled step
        self.loss_scales: list[float] = []  # of each backward in a sampled step

    def install(self) -> None:
        probe = self
        original_init = Optimizer.__init__

        @wraps(original_init)
        def __init__(self, params, *args, **kwargs):
            original_init(self, params, *args, **kwargs)
            for group in self.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        p.register_hook(functools.partial(probe.keep_local, p))

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
        if is_sampled_step(self.state.steps + 1):
            key = id(parameter)
            self.local[key] = grad.detach().clone() if key not in self.local else self.local[key] + grad.detach()

    def backward_started(self, loss: torch.Tensor) -> None:
        if is_sampled_step(self.state.steps + 1) and len(self.loss_scales) < MAX_SCALES:
            self.loss_scales.append(loss_scale(loss))

    def step_sync(self, params) -> str | None:
        """How the gradients of the step about to be taken were synchronised:
        "ddp", "all_reduce" or None. Clears the marks for the next step."""
        if self.state.ddp_forward_ready:
            how = "ddp"
        else:
            how = "all_reduce" if self.reduced and _reduced_a_gradient(self.reduced, params) else None
        self.state.ddp_forward_ready, self.reduced = False, []
        return how

    def step_gradients(self, params) -> dict:
        """The sampled step about to be taken: this rank's own gradient and the
        applied one (fingerprints), and its backwards' loss scales."""
        own = [self.local.get(id(p), torch.zeros_like(p)) for p in params]
        applied = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        facts = {
            "own_gradient": fingerprint.parameters(own),
            "applied_gradient": fingerprint.parameters(applied),
            "loss_scales": self.loss_scales,
        }
        self.local, self.loss_scales = {}, []
        return facts


def loss_scale(loss: torch.Tensor) -> float:
    """The constant factor a backward's loss was scaled by: c for c * loss,
    1 / c for loss / c, through any chain of them; 1.0 for none."""
    scale, node = 1.0, loss.grad_fn
    for _ in range(8):
        name = type(node).__name__
        if name not in ("MulBackward0", "DivBackward0"):
            break
        (first, _), (second, _) = node.next_functions
        if name == "MulBackward0" and (first is None) != (second is None):
            constant, source = (node._saved_other, first) if second is None else (node._saved_self, second)
        elif name == "DivBackward0" and first is not None and second is None:
            constant, source = node._saved_other, first
        else:
            break
        if not isinstance(constant, torch.Tensor) or constant.numel() != 1 or not float(constant):
            break
        scale *= float(constant) if name == "MulBackward0" else 1 / float(constant)
        node = source
    return scale


def _reduced_a_gradient(reduced: list[tuple[int, int]], params) -> bool:
    grads = [p.grad for p in params if p.grad is not None]
    pointers = {g.data_ptr() for g in grads}
    sizes = {g.numel() for g in grads} | {sum(g.numel() for g in grads)}  # one gradient, or all flattened
    return any(pointer in pointers or size in sizes for pointer, size in reduced)

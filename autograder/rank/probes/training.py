"""Probe: optimizer steps, the loss of each backward pass, snapshots of the
parameters (as fingerprints) at sampled steps and at the end, and how each
step's gradients were synchronised (gradients.py)."""

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import ddp, fingerprint
from .gradients import GradientsProbe
from .state import Probe, RankState

MAX_LOSSES = 5000


def _is_snapshot_step(step: int) -> bool:
    """Every early step, then every tenth: enough to draw the spread over time."""
    return step <= 20 or step % 10 == 0


def _params(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"]]


class TrainingProbe(Probe):
    def __init__(self, state: RankState, gradients: GradientsProbe):
        super().__init__(state)
        self.gradients = gradients
        self.losses: list[tuple[int, float]] = []
        # The first optimizer that steps is the one judged. Its parameters are
        # held here so they can be read after main has returned.
        self.optimizer_id: int | None = None
        self.params: list = []
        self.synced_steps = {"ddp": 0, "all_reduce": 0}

    def install(self) -> None:
        guarded = self.state.guarded
        register_optimizer_step_pre_hook(lambda *a: guarded(self.before_step, *a))
        register_optimizer_step_post_hook(lambda *a: guarded(self.after_step, *a))
        original_backward, losses, state = torch.Tensor.backward, self.losses, self.state

        def backward(self, *args, **kwargs):
            if self.numel() == 1 and len(losses) < MAX_LOSSES:
                losses.append((state.steps, float(self.detach())))
            return original_backward(self, *args, **kwargs)

        torch.Tensor.backward = backward

    def before_step(self, optimizer, _args, _kwargs) -> None:
        if self.optimizer_id is None:
            self.optimizer_id, self.params = id(optimizer), _params(optimizer)
            wrapped = ddp.wrapped_parameter_ids(self.state)
            own, applied = self.gradients.first_step_gradients(self.params)
            self.state.record(
                "first_step",
                parameters=len(self.params),
                parameters_in_ddp=sum(id(p) in wrapped for p in self.params),
                fingerprint=fingerprint.parameters(self.params),
                local_gradient=own,
                applied_gradient=applied,
            )
        if self.optimizer_id == id(optimizer):
            how = self.gradients.step_sync(self.params)
            if how:
                self.synced_steps[how] += 1

    def after_step(self, optimizer, _args, _kwargs) -> None:
        if self.optimizer_id != id(optimizer):
            return
        self.state.steps += 1
        if _is_snapshot_step(self.state.steps):
            self.state.record("snapshot", fingerprint=fingerprint.parameters(self.params))

    def finish(self) -> None:
        params = self.params
        if not params and ddp.last_wrapped_module(self.state) is not None:  # nothing stepped: compare the DDP model
            params = list(ddp.last_wrapped_module(self.state).parameters())
        self.state.record(
            "training_end",
            steps=self.state.steps,
            losses=self.losses,
            fingerprint=fingerprint.parameters(params) if params else None,
            ddp_synced_steps=self.synced_steps["ddp"],
            allreduce_synced_steps=self.synced_steps["all_reduce"],
        )

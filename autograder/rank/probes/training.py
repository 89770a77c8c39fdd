"""Probe: optimizer steps, the loss of each backward pass, snapshots of the
parameters (as fingerprints) at sampled steps and at the end, and how each
step's gradients were synchronised and what the sampled steps applied
(gradients.py)."""

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import ddp, fingerprint
from .gradients import GradientsProbe
from .state import Probe, RankState, is_sampled_step

MAX_LOSSES = 5000


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
        original_backward, losses, state, gradients = torch.Tensor.backward, self.losses, self.state, self.gradients

        def backward(self, *args, **kwargs):
            if self.numel() == 1:
                if len(losses) < MAX_LOSSES:
                    losses.append((state.steps, float(self.detach())))
                guarded(gradients.backward_started, self)
            return original_backward(self, *args, **kwargs)

        torch.Tensor.backward = backward

    def before_step(self, optimizer, _args, _kwargs) -> None:
        if self.optimizer_id is None:
            self.optimizer_id, self.params = id(optimizer), _params(optimizer)
            wrapped = ddp.wrapped_parameter_ids(self.state)
            self.state.record(
                "first_step",
                parameters=len(self.params),
                parameters_in_ddp=sum(id(p) in wrapped for p in self.params),
                fingerprint=fingerprint.parameters(self.params),
            )
        if self.optimizer_id == id(optimizer):
            how = self.gradients.step_sync(self.params)
            if how:
                self.synced_steps[how] += 1
            if is_sampled_step(self.state.steps + 1):
                self.state.record("step_gradients", **self.gradients.step_gradients(self.params))

    def after_step(self, optimizer, _args, _kwargs) -> None:
        if self.optimizer_id != id(optimizer):
            return
        self.state.steps += 1
        if is_sampled_step(self.state.steps):
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

"""Probe: optimizer steps, the loss of each backward pass, snapshots of the
parameters (as fingerprints) at sampled steps and at the end, and how each
step's gradients were synchronised (gradients.py)."""

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import ddp, fingerprint, gradients
from .state import RankState

MAX_LOSSES = 5000


def _is_snapshot_step(step: int) -> bool:
    """Every early step, then every tenth: enough to draw the spread over time."""
    return step <= 20 or step % 10 == 0


def _params(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"]]


def install(state: RankState) -> None:
    losses = state.extras.setdefault("losses", [])
    # The first optimizer that steps is the one judged. Its parameters are
    # held here so they can be read after main has returned.
    trained = state.extras.setdefault("trained", {})
    synced = state.extras["synced_steps"] = {"ddp": 0, "all_reduce": 0}

    def before_step(optimizer, _args, _kwargs):
        if "optimizer_id" not in trained:
            trained["optimizer_id"] = id(optimizer)
            trained["params"] = params = _params(optimizer)
            wrapped = ddp.wrapped_parameter_ids(state)
            own, applied = gradients.first_step_gradients(state, params)
            state.record(
                "first_step",
                parameters=len(params),
                parameters_in_ddp=sum(id(p) in wrapped for p in params),
                fingerprint=fingerprint.parameters(params),
                local_gradient=own,
                applied_gradient=applied,
            )
        if trained["optimizer_id"] == id(optimizer):
            how = gradients.step_sync(state, trained["params"])
            if how:
                synced[how] += 1

    def after_step(optimizer, _args, _kwargs):
        if trained.get("optimizer_id") != id(optimizer):
            return
        state.steps += 1
        if _is_snapshot_step(state.steps):
            state.record("snapshot", fingerprint=fingerprint.parameters(trained["params"]))

    register_optimizer_step_pre_hook(lambda *a: state.guarded(before_step, *a))
    register_optimizer_step_post_hook(lambda *a: state.guarded(after_step, *a))

    original_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        if self.numel() == 1 and len(losses) < MAX_LOSSES:
            losses.append((state.steps, float(self.detach())))
        return original_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward


def finish(state: RankState) -> None:
    losses = state.extras.get("losses", [])
    params = state.extras.get("trained", {}).get("params")
    if not params and ddp.last_wrapped_module(state) is not None:  # nothing stepped: compare the DDP model
        params = list(ddp.last_wrapped_module(state).parameters())
    synced = state.extras.get("synced_steps", {})
    state.record(
        "training_end",
        steps=state.steps,
        losses=losses,
        fingerprint=fingerprint.parameters(params) if params else None,
        ddp_synced_steps=synced.get("ddp", 0),
        allreduce_synced_steps=synced.get("all_reduce", 0),
    )

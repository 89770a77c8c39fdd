"""The checks: each one an id, its points, and a pure function of the run's
records that returns passed, failed (with a hint) or skipped.

One module per family, in the order of the five DDP changes: `group` (the
process group), `data` (the sampler), `model` (DDP and the averaged
gradients), `evaluation` (the test set, shared out), `writes` (checkpoints
and logs), `lifecycle` (the group's end, the launcher, the GPU) and
`torchrun` (snapshots and resuming). `registry` holds what they share.

The report's order is the order of FAMILIES below, and in each family the
order its module defines its checks in. Adding a check is one decorated
function in its family's module: the exercises, the grade cells, the points
and the README's tables follow from the registry (README, "Add a check").
"""

from __future__ import annotations

from . import (
    data,
    evaluation,
    group,
    lifecycle,
    model,
    registry,
    torchrun,
    writes,
)  # importing a family registers its checks
from .evaluation import EVALUATION_CHANGE
from .registry import Check, by_id, check, run_checks
from .torchrun import TORCHRUN_CHANGE

FAMILIES = (group, data, model, evaluation, writes, lifecycle, torchrun)  # the report's order


def all_checks() -> list[Check]:
    """Every check, in the report's order: the families' order, then the
    order each family's module defines its checks in (a check defined
    elsewhere comes last)."""
    place = {family.__name__: i for i, family in enumerate(FAMILIES)}
    return sorted(registry.REGISTERED.values(), key=lambda c: place.get(c.judge.__module__, len(FAMILIES)))


__all__ = ["EVALUATION_CHANGE", "FAMILIES", "TORCHRUN_CHANGE", "Check", "all_checks", "by_id", "check", "run_checks"]

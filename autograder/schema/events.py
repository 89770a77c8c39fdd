"""The event schema: every fact a probe may record, declared once.

The rank side writes events through `RankState.record`, which refuses a kind
or a field that is not declared here; the judge reads them through `parse`,
which gives the declared default to every field that is missing or not of
its declared shape, so a check never meets a half-written or forged event it
cannot read. Each event also carries `kind`, `time` (wall clock) and `step`
(optimizer steps taken so far on that rank).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class Shape:
    """What a field may hold, and what it reads as when it holds anything else.

    Student code runs beside the probes and can send on its rank's records
    channel too, so a field may hold anything: parse() checks each one
    against its shape and gives the default to a field that does not fit. A
    check never meets a wrong type.
    """

    default: Any
    fits: Callable[[Any], bool]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def text(default: str = "") -> Shape:
    return Shape(default, lambda v: isinstance(v, str))


def integer(default: int = 0) -> Shape:
    return Shape(default, _integer)


def number(default: float = 0.0) -> Shape:
    return Shape(default, lambda v: _number(v) and not math.isnan(v))


def flag(default: bool = False) -> Shape:
    return Shape(default, lambda v: isinstance(v, bool))


def optional(shape: Shape) -> Shape:
    return Shape(None, lambda v: v is None or shape.fits(v))


def list_of(item: Shape) -> Shape:
    return Shape((), lambda v: isinstance(v, list) and all(item.fits(x) for x in v))


def dict_of(value: Shape) -> Shape:
    return Shape({}, lambda v: isinstance(v, dict) and all(isinstance(k, str) and value.fits(x) for k, x in v.items()))


def record(**fields: Shape) -> Shape:
    """A dict with exactly these fields, each fitting its shape."""
    return Shape(
        None,
        lambda v: isinstance(v, dict) and v.keys() == fields.keys() and all(s.fits(v[k]) for k, s in fields.items()),
    )


def pair(first: Shape, second: Shape) -> Shape:
    return Shape(None, lambda v: isinstance(v, list) and len(v) == 2 and first.fits(v[0]) and second.fits(v[1]))


def anything(default: Any = None) -> Shape:
    return Shape(default, lambda v: True)


COMMON_FIELDS = {"kind": text(), "time": number(), "step": integer()}
FINGERPRINT = list_of(number())
DATASET = record(length=integer(), content=optional(text()), items=dict_of(text()), unstable_items=integer())

# kind -> {field: shape}
EVENTS: dict[str, dict[str, Shape]] = {
    # process group (probes/process_group.py)
    "init_process_group": {"backend": optional(text()), "set_device_calls": list_of(text())},
    "init_refused": {"reason": text(), "hint": text()},
    "process_group_ready": {"backend": optional(text())},
    "destroy_process_group": {"default_group": flag()},
    "rank_end": {"process_group_still_initialized": flag()},
    # data (probes/sampler.py, probes/inputs.py)
    "sampler": {
        "sampler": integer(-1),
        "num_replicas": optional(integer()),
        "rank": optional(integer()),
        "shuffle": flag(),
        "drop_last": flag(),
        "dataset": optional(DATASET),
    },
    "sampler_epoch": {"sampler": integer(-1), "epoch": integer(), "indices": list_of(integer()), "finished": flag()},
    "plain_sampler_epoch": {
        "sampler_type": text(),
        "length": optional(integer()),
        "indices": list_of(integer()),
        "finished": flag(),
    },
    # What reached the trained model's forward in training (probes/inputs.py):
    # the dataset indices of each pass over a DataLoader with a
    # DistributedSampler (`epoch` is the sampler's set_epoch number), and those
    # that reached a forward outside training (`evaluated`); at the end, the
    # rows from a DataLoader without one or from no DataLoader.
    "model_fed": {
        "sampler": integer(-1),
        "epoch": integer(),
        "indices": list_of(integer()),
        "evaluated": list_of(integer()),
        "finished": flag(),
        "batch_size": optional(integer()),
        "drop_last": flag(),
    },
    "model_inputs": {"plain_rows": integer(), "unmatched_rows": integer(), "rows": integer()},
    # model (probes/ddp.py, probes/training.py, probes/gradients.py)
    "ddp_created": {"devices": optional(list_of(text()))},
    "ddp_forward_calls": {"calls": dict_of(integer())},
    "first_step": {"parameters": integer(), "parameters_in_ddp": integer(), "fingerprint": FINGERPRINT},
    # The gradient of a sampled step: this rank's own (what its backwards
    # produced), the one the optimizer applied (after any averaging), and the
    # constant factor each backward's loss was scaled by.
    "step_gradients": {
        "own_gradient": FINGERPRINT,
        "applied_gradient": FINGERPRINT,
        "loss_scales": list_of(number()),
    },
    "snapshot": {"fingerprint": FINGERPRINT},
    # Steps whose gradients DDP's reducer averaged (a DDP forward in
    # training prepared it), and steps after an all_reduce of the gradients.
    "training_end": {
        "steps": integer(),
        "losses": list_of(pair(integer(), number())),
        "fingerprint": optional(FINGERPRINT),
        "ddp_synced_steps": integer(),
        "allreduce_synced_steps": integer(),
    },
    # writes (probes/checkpoint.py, probes/files.py)
    "torch_save": {"path": optional(text())},
    "checkpoint_load": {
        "path": optional(text()),
        "ok": flag(),
        "problem": optional(text()),
        "error": text(),
        "model": text(),
    },
    "file_written": {"path": text()},
    # evaluation (rank/runner.py, probes/evaluation.py): what main returned, when it was a number, and
    # the final model's accuracy on the exercise's whole test set, as the grader measured it on rank 0
    "main_returned": {"value": optional(number())},
    "grader_evaluation": {"accuracy": number(), "samples": integer()},
    # the student's own launcher, run as `python FILE` (rank/own_launcher.py)
    "spawn_called": {"nprocs": anything(), "start_method": text(), "gpus": integer()},
    "spawn_refused": {"nprocs": anything()},
    "spawn_joined": {"error": text()},  # the ranks it started: "" when all finished
    "launcher_done": {"failed": flag(True), "error": text()},
    # torchrun's workers (rank/torchrun_worker.py, probes/snapshot.py, probes/spawn_guard.py)
    "torchrun_worker": {"attempt": integer(), "node": integer(), "local_rank": integer(), "world_size": integer()},
    "fault_injected": {"passes": integer()},
    # A worker's exit status as its torchrun agent reaped it (negative: the signal that killed it).
    "worker_exit": {"attempt": integer(), "worker": integer(), "exit_code": optional(integer())},
    "spawn_in_worker": {"function": text()},
    # A snapshot as it was on disk right after torch.save: content hashes of its
    # model and optimizer states (None: not in it), its epoch, and why its model
    # state does not load into the plain model with strict=True ("" when it does).
    "snapshot_saved": {
        "path": optional(text()),
        "passes_finished": integer(),
        "epoch": optional(integer()),
        "load_problem": text("not read"),
        "model_state": optional(text()),
        "optimizer_state": optional(text()),
    },
    "snapshot_loaded": {"model_state": optional(text()), "optimizer_state": optional(text())},
    "optimizer_at_start": {"state": optional(text())},
    # the rank itself (rank/runner.py, probes/state.py)
    "error": {
        "type": text(),
        "from_grader": flag(),
        "message": text(),
        "hint": text(),
        "frames": list_of(record(file=text(), line=optional(integer()), function=text(), code=optional(text()))),
    },
    "probe_error": {"where": text(), "error": text()},
    "rank_done": {"failed": flag(True)},
}


class CheckStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # does not apply: nothing to fix


class UnknownEvent(ValueError):
    """A probe tried to record something the schema does not declare: a grader bug."""


def validate(kind: str, facts: dict) -> None:
    declared = EVENTS.get(kind)
    if declared is None:
        raise UnknownEvent(f"no event kind {kind!r} in the schema")
    extra = facts.keys() - declared.keys()
    if extra:
        raise UnknownEvent(f"event {kind!r} has undeclared fields {sorted(extra)}")


def parse(raw: Any) -> dict | None:
    """An event as the checks see it (every declared field present, and of
    its shape), or None for a line that is not an event of the schema."""
    if not isinstance(raw, dict) or raw.get("kind") not in EVENTS:
        return None
    shapes = COMMON_FIELDS | EVENTS[raw["kind"]]
    event = {}
    for name, shape in shapes.items():
        value = raw.get(name, shape.default)
        event[name] = value if name in raw and shape.fits(value) else _fresh(shape.default)
    return event


def is_malformed(raw: Any) -> bool:
    """An event of the schema with a field that does not fit its shape: no probe writes one."""
    if not isinstance(raw, dict) or raw.get("kind") not in EVENTS:
        return False
    shapes = COMMON_FIELDS | EVENTS[raw["kind"]]
    return any(name in raw and not shape.fits(raw[name]) for name, shape in shapes.items())


def _fresh(default):
    """A default of its own for each event, so that no two events share a dict or list."""
    return dict(default) if isinstance(default, dict) else list(default) if isinstance(default, tuple) else default

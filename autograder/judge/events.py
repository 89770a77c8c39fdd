"""The event schema: every fact a probe may record, declared once.

The rank side writes events through `RankState.record`, which refuses a kind
or a field that is not declared here; the judge reads them through `parse`,
which fills in the declared default of every missing field, so a check never
meets a half-written event. Each event also carries `kind`, `time` (wall
clock) and `step` (optimizer steps taken so far on that rank).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

COMMON_FIELDS = ("kind", "time", "step")

# kind -> {field: default}. parse() gives each event its own copy of a dict default.
EVENTS: dict[str, dict[str, Any]] = {
    # process group (probes/process_group.py)
    "init_process_group": {"backend": None, "set_device_calls": ()},
    "init_refused": {"reason": "", "hint": ""},
    "process_group_ready": {"backend": None},
    "destroy_process_group": {"default_group": False},
    "rank_end": {"process_group_still_initialized": False},
    # data (probes/sampler.py)
    "sampler": {
        "sampler": -1,
        "num_replicas": None,
        "rank": None,
        "shuffle": False,
        "drop_last": False,
        "dataset": None,
    },
    "sampler_epoch": {"sampler": -1, "epoch": 0, "indices": (), "finished": False},
    "plain_sampler_epoch": {"sampler_type": "", "length": None, "indices": (), "finished": False},
    # model (probes/ddp.py, probes/training.py)
    "ddp_created": {"devices": ()},
    "ddp_forward_calls": {"calls": {}},
    "first_step": {"parameters": 0, "parameters_in_ddp": 0, "fingerprint": ()},
    "snapshot": {"fingerprint": ()},
    "training_end": {"steps": 0, "losses": (), "fingerprint": None},
    # writes (probes/checkpoint.py, probes/files.py)
    "torch_save": {"path": None},
    "checkpoint_load": {"path": None, "ok": False, "problem": None, "error": "", "model": ""},
    "file_written": {"path": ""},
    # the student's own launcher, run as `python FILE` (rank/own_launcher.py)
    "spawn_called": {"nprocs": None, "start_method": "", "gpus": 0},
    "spawn_refused": {"nprocs": None},
    "spawn_joined": {"error": ""},  # the ranks it started: "" when all finished
    "launcher_done": {"failed": True, "error": ""},
    # the rank itself (rank/runner.py, probes/state.py)
    "error": {"type": "", "from_grader": False, "message": "", "hint": "", "frames": ()},
    "probe_error": {"where": "", "error": ""},
    # output: {"stdout"|"stderr": [[line template, times written, first such line], ...]} (rank/output.py)
    "rank_done": {"failed": True, "output": {}},
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
    """An event as the checks see it (every declared field present), or None
    for a line that is not an event of the schema."""
    if not isinstance(raw, dict) or raw.get("kind") not in EVENTS:
        return None
    kind = raw["kind"]
    event = {"kind": kind, "time": raw.get("time", 0.0), "step": raw.get("step", 0)}
    event.update((k, dict(v) if isinstance(v, dict) else v) for k, v in EVENTS[kind].items())  # a dict per event
    event.update((k, v) for k, v in raw.items() if k in EVENTS[kind])
    return event

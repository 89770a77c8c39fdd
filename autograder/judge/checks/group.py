"""The check of change 1: every rank joins one process group, made for this
run's world size and backend, once."""

from __future__ import annotations

from ..records import RunRecords
from ..verdict import Outcome, failed, passed
from .registry import cannot_confirm, check


@check("process_group", "Process group created", 2, "Change 1")
def process_group(run: RunRecords) -> Outcome:
    """Passes when every rank created the default process group for this run's world size, each rank once, with
    this run's backend."""
    # A refused call is the cause; a rank stopped before its own call is only a consequence.
    for r in sorted(run.ranks, key=lambda r: r.first("init_refused") is None):
        calls = r.all("init_process_group")
        if not calls:
            if not r.finished:
                return cannot_confirm(run, "that every rank created the process group")
            return failed(
                f"Rank {r.rank} never called init_process_group.",
                "Call dist.init_process_group(backend, rank=rank, world_size=world_size) at the start of main.",
                r.rank,
            )
        refused = r.first("init_refused")
        if refused is not None:
            return failed(f"Rank {r.rank}: {refused['reason']}", refused["hint"], r.rank)
        if len(calls) > 1:
            return failed(
                f"Rank {r.rank} called init_process_group {len(calls)} times.",
                "Create the process group once per rank, at the start of main.",
                r.rank,
            )
        ready = r.first("process_group_ready")
        if ready is None:
            return failed(
                f"Rank {r.rank} called init_process_group, but the group was never ready "
                f"({run.why_not_reached(r.rank)}).",
                "Look at the error above: the group could not be created.",
                r.rank,
            )
        if ready["backend"] != run.backend:
            return failed(
                f"Rank {r.rank} created its process group with the {ready['backend']} backend, but this run "
                f"uses {run.backend}.",
                "Use 'nccl' when there is a GPU per rank and 'gloo' on the CPU: "
                "'nccl' if torch.cuda.is_available() else 'gloo'.",
                r.rank,
            )
    return passed(f"All {run.world_size} ranks joined one {run.backend} process group, each with its own rank.")

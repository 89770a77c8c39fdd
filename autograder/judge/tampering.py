"""The ranks' records against what the grader saw from outside them.

The probes run inside the ranks, beside the student's code, so code that
tries hard enough can change what they record. What the launcher and the
sandbox saw cannot be changed from inside: who connected to the records
channel, which ranks wrote to the rendezvous and to each file left behind
(the kernel tells), how much traffic
passed between the ranks. Records that contradict that evidence were tampered
with, and the run is not graded.
"""

from __future__ import annotations

from ..disk import CHECKPOINT_SUFFIXES
from .records import RankRecords, RunRecords

TAMPERING_HINT = (
    "The grader compares the ranks' records with what it sees from outside them, and they disagree, so this "
    "run gets no points. Leave the grader's probes, records and files alone; if you did not touch them, "
    "tell your instructor."
)


def _written(records: RankRecords) -> list[str]:
    """Paths the rank's records say it wrote."""
    saved = [e["path"] for e in records.all("torch_save") if isinstance(e["path"], str)]
    return saved + [e["path"] for e in records.all("file_written")]


def _unseen_checkpoints(run: RunRecords) -> list[str]:
    found = []
    for name, ranks in run.launch.evidence.written_by.items():
        for rank in ranks if name.endswith(CHECKPOINT_SUFFIXES) else ():
            if rank < len(run.ranks) and not any(path.endswith("/" + name) for path in _written(run.ranks[rank])):
                found.append(f"rank {rank} wrote {name}, but its records show no such write")
    return found


def _no_traffic(run: RunRecords) -> list[str]:
    packets = run.launch.evidence.loopback_packets
    if run.world_size < 2 or packets is None or not run.ranks:
        return []
    steps = min(r.averaged_steps for r in run.ranks)
    joined = all(r.first("process_group_ready") for r in run.ranks)
    # A process group's ranks connect to each other, and every averaging step
    # sends each rank's gradients to the others: at least a packet a step.
    if (joined or steps) and packets < max(steps, 1):
        claim = f"averaged gradients in {steps} steps" if steps else "joined a process group"
        return [f"the ranks' records say they {claim}, but {packets} packets passed between them"]
    return []


def _never_joined(run: RunRecords) -> list[str]:
    joined = run.launch.evidence.joined
    if joined is None:
        return []
    return [
        f"rank {r.rank}'s records say it joined the process group, but it never wrote to the rendezvous"
        for r in run.ranks
        if r.first("process_group_ready") and r.rank not in joined
    ]


def contradictions(run: RunRecords) -> list[str]:
    """What the records claim and the evidence denies; empty for an honest run."""
    launch = run.launch
    if launch is None:
        return []
    intrusions = [*launch.intrusions, *(i for job in launch.jobs.values() for i in job.intrusions)]
    found = [f"{intrusion} (on the records channel)" for intrusion in intrusions]
    if launch.evidence.sandboxed:
        found += _never_joined(run) + _unseen_checkpoints(run) + _no_traffic(run)
    return found

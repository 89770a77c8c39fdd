"""The records of one run, as the checks see them: per-rank facts written by
the probes, and what the launcher saw from outside."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .submission import StudentProblem

if TYPE_CHECKING:  # types only: the checks, and the reports that use them, need no torch
    from .launch import LaunchResult, RankOutcome


@dataclass
class RankRecords:
    rank: int
    events: list[dict]
    outcome: RankOutcome | None

    def all(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["kind"] == kind]

    def first(self, kind: str) -> dict | None:
        return next((e for e in self.events if e["kind"] == kind), None)

    @property
    def finished(self) -> bool:
        done = self.first("rank_done")
        return done is not None and not done["failed"] and self.outcome is not None and self.outcome.status == "finished"

    @property
    def error(self) -> dict | None:
        return self.first("error")


@dataclass
class RunRecords:
    exercise: str
    world_size: int
    backend: str
    ranks: list[RankRecords]
    launch: LaunchResult | None
    files_left: list[str] = field(default_factory=list)
    problem: StudentProblem | None = None  # the code could not run at all

    @property
    def all_finished(self) -> bool:
        return self.problem is None and bool(self.ranks) and all(r.finished for r in self.ranks)

    def why_not_reached(self, rank: int) -> str:
        """Why a rank has no record of something: for messages."""
        if self.problem is not None:
            return "the code could not run (see the error above)"
        records = self.ranks[rank] if rank < len(self.ranks) else None
        status = records.outcome.status if records and records.outcome else None
        if status == "hung":
            return f"rank {rank} was still running at the deadline"
        if status == "stopped":
            return f"rank {rank} was stopped because another rank failed"
        if records is not None and records.error is not None:
            return f"rank {rank} stopped with an error first (see the error above)"
        return f"rank {rank} finished without doing it"


def _read_events(path: Path) -> list[dict]:
    events = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return events
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:  # the last line of a killed rank may be cut short
            pass
    return events


def collect(exercise: str, world_size: int, backend: str, launch: LaunchResult, record_path, files_left) -> RunRecords:
    ranks = [
        RankRecords(rank, _read_events(record_path(rank)), launch.ranks[rank] if rank < len(launch.ranks) else None)
        for rank in range(world_size)
    ]
    return RunRecords(exercise, world_size, backend, ranks, launch, files_left)

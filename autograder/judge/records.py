"""The records of one run, as the checks see them: each rank's events (as
the event schema declares them) and what the launcher saw from outside."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..schema.events import EVENTS, is_malformed, parse
from ..schema.run import MAX_OWN_LAUNCHER_RANKS, Evidence, LaunchResult, RankOutcome, RankStatus
from ..submission import StudentProblem
from ..wording import RANK_STATUS_WORDS, exit_phrase

# Every rank's probes write these on the way out, before rank_done: a rank_done
# without them is a record stream that contradicts itself.
END_OF_RUN = ("rank_end", "ddp_forward_calls", "training_end")
# What gloo says on a rank whose peer is gone.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Read error", "Broken pipe")


@dataclass
class RankRecords:
    rank: int
    events: list[dict]
    outcome: RankOutcome | None
    malformed: int = 0  # events with a field no probe would write: the stream was tampered with

    def all(self, kind: str) -> list[dict]:
        assert kind in EVENTS, kind  # a check reading an undeclared kind is a grader bug
        return [e for e in self.events if e["kind"] == kind]

    def first(self, kind: str) -> dict | None:
        return next(iter(self.all(kind)), None)

    @property
    def complete(self) -> bool:
        return all(self.first(kind) is not None for kind in END_OF_RUN)

    @property
    def finished(self) -> bool:
        done = self.first("rank_done")
        return (
            done is not None
            and not done["failed"]
            and self.complete
            and not self.malformed
            and self.outcome is not None
            and self.outcome.status == RankStatus.FINISHED
        )

    @property
    def error(self) -> dict | None:
        return self.first("error")

    @property
    def averaged_steps(self) -> int:
        """Steps whose gradients were averaged over the ranks, by DDP or by hand."""
        end = self.first("training_end")
        return end["ddp_synced_steps"] + end["allreduce_synced_steps"] if end else 0


@dataclass
class TorchrunJobRecords:
    """One torchrun job of a grading: its workers' records, attempt by attempt
    (a restart is a new attempt), and its agents, one per node."""

    name: str
    attempts: list[list[RankRecords]]  # per attempt, per global rank
    agents: list[RankOutcome]

    @property
    def last(self) -> list[RankRecords]:
        return self.attempts[-1]

    @property
    def workers(self) -> list[RankRecords]:
        return [worker for attempt in self.attempts for worker in attempt]

    @property
    def finished(self) -> bool:
        return all(w.finished for w in self.last) and all(a.exit_code == 0 for a in self.agents)


@dataclass
class RunRecords:
    exercise: str
    world_size: int
    backend: str
    ranks: list[RankRecords]
    launch: LaunchResult | None
    files_left: list[str] = field(default_factory=list)
    problem: StudentProblem | None = None  # the code could not run at all
    # The run of the student's own launcher (`python FILE`), after the graded
    # ranks finished; None when it was not run.
    own_launcher: RankRecords | None = None
    # The events of each rank the student's launcher started (its process group probe).
    own_launcher_ranks: list[RankRecords] = field(default_factory=list)
    # What the grader found in each checkpoint the ranks left (disk.py): real path -> {"problem", "error"}.
    checkpoints: dict[str, dict] = field(default_factory=dict)
    unsandboxed: str = ""  # why the ranks ran without the sandbox; "" when they ran in it
    # A torchrun program's jobs (launch/torchrun.py), by name; `ranks` are the reference job's workers.
    torchrun: dict[str, TorchrunJobRecords] = field(default_factory=dict)

    @property
    def all_finished(self) -> bool:
        return self.problem is None and self.has_every_rank and all(r.finished for r in self.ranks)

    @property
    def has_every_rank(self) -> bool:
        return [r.rank for r in self.ranks] == list(range(self.world_size))

    @property
    def root_cause_rank(self) -> int | None:
        """The rank whose failure stopped the run: the one that failed first.
        Its error is the cause; the others often fail a moment later only
        because it is gone ("Connection closed by peer"). For a run that hung,
        the first rank still waiting. None when nothing stopped the run."""
        if self.launch is None:
            return None

        def failed_at(records: RankRecords) -> float:
            times = [records.error["time"]] if records.error else []
            if records.outcome is not None and records.outcome.exited_at is not None:
                times.append(records.outcome.exited_at)
            return min(times, default=float("inf"))

        def peer_gone(records: RankRecords) -> bool:
            # The error of a rank whose peer died under it: the peer is the cause.
            return bool(records.error) and any(text in records.error["message"] for text in PEER_GONE)

        # A rank that raised may still be on its way out when its peer, cut off,
        # exits first and gets it stopped: its own error record makes it a candidate.
        failed = [r for r in self.ranks if r.error or (r.outcome and r.outcome.status == RankStatus.FAILED)]
        if failed:
            return min(failed, key=lambda r: (peer_gone(r), failed_at(r))).rank
        if self.launch.first_failure is not None:
            return self.launch.first_failure
        if self.launch.hung:
            return self.launch.hung[0]
        return next((r.rank for r in self.ranks if not r.finished), None)

    def why_not_reached(self, rank: int) -> str:
        """Why a rank has no record of something: for messages."""
        if self.problem is not None:
            return "the code could not run (see the error above)"
        records = self.ranks[rank] if rank < len(self.ranks) else None
        status = records.outcome.status if records and records.outcome else None
        if records is not None and records.error is not None:  # even if stopped on its way out
            return f"rank {rank} stopped with an error first (see the error above)"
        if status in (RankStatus.HUNG, RankStatus.STOPPED):
            return f"rank {rank} was {RANK_STATUS_WORDS[status]}"
        if status == RankStatus.FAILED and records.outcome.exit_code is not None:
            return f"rank {rank} {exit_phrase(records.outcome.exit_code)} before main returned"
        if records is not None and records.malformed:
            return (
                f"the run's records are incomplete: rank {rank}'s hold {records.malformed} event(s) that the "
                "grader did not write"
            )
        if records is not None and records.first("rank_done") is not None and not records.complete:
            return f"the run's records are incomplete (rank {rank} ended without its end-of-run records)"
        return f"rank {rank} finished without doing it"

    # Saved runs are the fixtures of the judge's fast tests (tools/record_fixtures.py).
    def to_dict(self) -> dict:
        return {
            "exercise": self.exercise,
            "world_size": self.world_size,
            "backend": self.backend,
            "ranks": [{"rank": r.rank, "events": r.events, "malformed": r.malformed} for r in self.ranks],
            "launch": _launch_dict(self.launch),
            "files_left": self.files_left,
            "problem": asdict(self.problem) if self.problem else None,
            **own_launcher_dict(self.own_launcher, self.own_launcher_ranks),
            "checkpoints": self.checkpoints,
            "unsandboxed": self.unsandboxed,
        }

    @classmethod
    def from_dict(cls, data: dict) -> RunRecords:
        launch = _launch_from_dict(data["launch"])
        ranks = [
            RankRecords(
                r["rank"],
                _parsed(r["events"]),
                _outcome(launch, r["rank"]),
                r.get("malformed", 0) + sum(map(is_malformed, r["events"])),
            )
            for r in data["ranks"]
        ]
        problem = StudentProblem(**data["problem"]) if data["problem"] else None
        return cls(
            data["exercise"],
            data["world_size"],
            data["backend"],
            ranks,
            launch,
            data["files_left"],
            problem,
            *own_launcher_from_dict(data),
            data.get("checkpoints", {}),
            data.get("unsandboxed", ""),
            collect_torchrun(launch) if launch is not None and launch.attempts else {},
        )


def _launch_dict(launch: LaunchResult | None) -> dict | None:
    """What the launcher saw, as saved. The graded ranks' records are saved
    with the ranks; a torchrun job's attempts keep theirs, and its other jobs
    are saved the same way."""
    if launch is None:
        return None
    jobs = {name: _launch_dict(job) for name, job in launch.jobs.items()}
    return asdict(launch) | {"records": [], "started_records": [], "jobs": jobs}


def _launch_from_dict(data: dict | None) -> LaunchResult | None:
    if data is None:
        return None
    return LaunchResult(
        **data
        | {
            "ranks": [_rebuilt_outcome(o) for o in data["ranks"]],
            "evidence": Evidence(**data["evidence"]),
            "attempt_outcomes": [
                [_rebuilt_outcome(o) for o in attempt] for attempt in data.get("attempt_outcomes", [])
            ],
            "agents": [_rebuilt_outcome(o) for o in data.get("agents", [])],
            "jobs": {name: _launch_from_dict(job) for name, job in data.get("jobs", {}).items()},
        }
    )


def _rebuilt_outcome(data: dict) -> RankOutcome:
    return RankOutcome(**(data | {"status": RankStatus(data["status"])}))


# The student's own launcher's records, and those of the ranks it started.
OwnLauncherRun = tuple[RankRecords | None, list[RankRecords]]


def own_launcher_dict(launcher: RankRecords | None, started: list[RankRecords]) -> dict:
    """The run of the student's own launcher, as saved (RunRecords.to_dict, and a
    second world size's grading that reuses it)."""
    saved = None
    if launcher is not None:
        saved = {"events": launcher.events, "outcome": asdict(launcher.outcome) if launcher.outcome else None}
    return {"own_launcher": saved, "own_launcher_ranks": [r.events for r in started]}


def own_launcher_from_dict(data: dict) -> OwnLauncherRun:
    own, launcher = data.get("own_launcher"), None
    if own is not None:
        outcome = own["outcome"] and _rebuilt_outcome(own["outcome"])
        launcher = RankRecords(0, _parsed(own["events"]), outcome)
    started = data.get("own_launcher_ranks", [])
    return launcher, [RankRecords(rank, _parsed(events), None) for rank, events in enumerate(started)]


def _parsed(raw_events) -> list[dict]:
    return [event for event in map(parse, raw_events) if event is not None]


def _outcome(launch: LaunchResult | None, rank: int) -> RankOutcome | None:
    return launch.ranks[rank] if launch is not None and rank < len(launch.ranks) else None


def read_records(rank: int, raw: list, outcome: RankOutcome | None) -> RankRecords:
    return RankRecords(rank, _parsed(raw), outcome, sum(map(is_malformed, raw)))


def collect_own_launcher(launch: LaunchResult) -> OwnLauncherRun:
    """The launcher's records, and those of the ranks it started."""
    events = _parsed(launch.records[0]) if launch.records else []
    launcher_records = RankRecords(0, events, launch.ranks[0] if launch.ranks else None)
    asked = next((e["nprocs"] for e in events if e["kind"] == "spawn_called"), 0)
    count = asked if isinstance(asked, int) and 0 < asked <= MAX_OWN_LAUNCHER_RANKS else 0
    started = [RankRecords(i, _parsed(launch.started_records[i]), None) for i in range(count)]
    return launcher_records, started


def collect(exercise: str, world_size: int, backend: str, launch: LaunchResult, files_left) -> RunRecords:
    streams = launch.records
    ranks = [
        read_records(rank, streams[rank] if rank < len(streams) else [], _outcome(launch, rank))
        for rank in range(world_size)
    ]
    return RunRecords(exercise, world_size, backend, ranks, launch, files_left)


def collect_torchrun(launch: LaunchResult) -> dict[str, TorchrunJobRecords]:
    """The reference job (the launch itself) and the grading's other torchrun jobs."""
    jobs = {"reference": launch, **launch.jobs}
    return {
        name: TorchrunJobRecords(
            name,
            [
                [read_records(rank, raw, outcomes[rank]) for rank, raw in enumerate(streams)]
                for streams, outcomes in zip(result.attempts, result.attempt_outcomes, strict=True)
            ],
            result.agents,
        )
        for name, result in jobs.items()
    }

"""Launch, the parent side: start a run's ranks, watch them against the
deadline, and leave no process behind.

A launcher is one class behind the `Launcher` interface. It is given a `Job`
(what to run) and a private folder, lays out the run's own files there (the
rendezvous store, the records socket, each rank's output) and returns a
`LaunchResult`: each rank's records, and what it saw of the run from
outside. This module imports no torch, so the judge and the notebook side
can use its types.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import import_module
from pathlib import Path
from typing import ClassVar

from .sandbox import DEFAULT_LIMITS, Evidence, Limits

DEFAULT_WORLD_SIZE = 2
HIDDEN_WORLD_SIZE = 3  # the hidden tests' run: a world size the student did not see graded
DEFAULT_TIMEOUT_S = 120.0
MAX_OWN_LAUNCHER_RANKS = 8  # the most ranks a student's own launcher may start while graded


class RankStatus(StrEnum):
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"  # killed by the launcher because another rank failed
    HUNG = "hung"  # still running at the deadline
    NOT_STARTED = "not started"


@dataclass
class RankOutcome:
    rank: int
    exit_code: int | None
    status: RankStatus
    output: str = ""
    output_bytes: int = 0
    stack: str = ""
    exited_at: float | None = None  # wall clock, when the launcher saw it exit
    # What reached the rank's output pipe, by line template (lines.py):
    # [[template, times written, first such line], ...], the most written first.
    lines: list = field(default_factory=list)


@dataclass
class LaunchResult:
    ranks: list[RankOutcome]
    duration_s: float
    records: list[list] = field(default_factory=list)  # per rank, the raw events it sent
    first_failure: int | None = None  # the rank the launcher saw fail first
    hung: list[int] = field(default_factory=list)
    start_error: str | None = None  # the ranks could not be started at all
    started_records: list[list] = field(default_factory=list)  # per rank a student's own launcher started
    evidence: Evidence = field(default_factory=Evidence)
    intrusions: list[str] = field(default_factory=list)  # record streams the channel kept out
    # A torchrun job (torchrun.py): `records` and `ranks` are its workers' last
    # attempt; these hold every attempt, the agents, and the grading's other jobs.
    attempts: list[list[list]] = field(default_factory=list)  # per attempt, per rank: the raw events
    attempt_outcomes: list[list[RankOutcome]] = field(default_factory=list)
    agents: list[RankOutcome] = field(default_factory=list)  # one per node
    jobs: dict[str, LaunchResult] = field(default_factory=dict)  # name -> the other torchrun jobs of the grading


@dataclass(frozen=True)
class Job:
    """What to run, and under which rules; nothing about how ranks start."""

    world_size: int
    backend: str  # resolved: "gloo" or "nccl"
    hide_gpus: bool  # a gloo run on a GPU machine: ranks see no GPU
    timeout_s: float
    module_path: Path  # the submission, as the ranks import it
    workdir: Path  # the ranks' working folder; files left here were written by them
    is_notebook: bool
    # This process has run no torch computation, so ranks may fork from it.
    fork_from_here: bool = False
    sandboxed: bool = False  # the ranks run in the run's sandbox (sandbox.py)
    limits: Limits = DEFAULT_LIMITS


class Launcher(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def launch(self, job: Job, private_dir: Path) -> LaunchResult:
        """Run the job's ranks to the end, the first failure or the deadline.
        Every process started for the job is gone when this returns."""


# kind -> "module:class", imported on use: the local launchers import torch.
LAUNCHERS = {
    "mp": "autograder.launch.local:MultiprocessingLauncher",
    "process": "autograder.launch.process:ProcessLauncher",
    "torchrun": "autograder.launch.torchrun:TorchrunLauncher",
}


def launcher(kind: str) -> Launcher:
    module, _, name = LAUNCHERS[kind].partition(":")
    return getattr(import_module(module), name)()

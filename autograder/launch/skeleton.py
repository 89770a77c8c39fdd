"""The one shape of every launch: contain the run, capture each process's
output, write the spec, start the processes, supervise them to the end,
and close what was opened. A launcher writes only how its processes start
(`start`) and, where it needs to, what it starts them for (`slots`,
`output_names`, `prepare`, `result`).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..rank.spec import RankSpec
from ..schema.run import LaunchResult
from . import Job
from .capture import CappedOutput
from .contain import Containment
from .supervise import StartedRank, start_error, stop_all, supervise


@dataclass
class Launch:
    """One launch in progress, as the skeleton has set it up for `start`."""

    job: Job  # as the launcher was given it
    private_dir: Path
    containment: Containment
    outputs: list[CappedOutput]  # one per started process, in slot order
    spec: RankSpec
    more_outputs: list[CappedOutput] = field(default_factory=list)  # those the started processes' children write

    @property
    def captures(self) -> list[CappedOutput]:
        return [*self.outputs, *self.more_outputs]


class Launcher(ABC):
    kind: ClassVar[str]
    # Forking with a drain thread alive is unsafe: such a launcher starts draining once its processes started.
    drains_after_start: ClassVar[bool] = False

    def launch(self, job: Job, private_dir: Path) -> LaunchResult:
        """Run the job's processes to the end, the first failure or the
        deadline. Every process started for the job is gone when this returns."""
        private_dir.mkdir(exist_ok=True)
        slots = self.slots(job)
        containment = Containment(slots, private_dir)
        outputs = [CappedOutput(str(private_dir / name)) for name in self.output_names(slots)]
        inherited = self.inherited_fds(slots, containment, outputs)
        spec = RankSpec.for_run(slots, private_dir, containment, [c.path for c in outputs], inherited)
        launch = Launch(job, private_dir, containment, outputs, spec)
        self.prepare(launch)
        if not self.drains_after_start:
            _drain(launch.captures)
        started_at, started, failure = time.monotonic(), [], None
        try:
            try:
                self.start(launch, started)
            except Exception as error:  # e.g. out of memory or processes
                failure = error
            if self.drains_after_start:
                _drain(launch.captures)  # even if starting failed half-way
            if failure is not None:
                stop_all(started, launch.captures)
                return start_error(started_at, failure, containment)
            result = supervise(started, launch.captures, spec, started_at, job.timeout_s, containment)
        finally:
            for process in started:
                os.close(process.sentinel)
        return self.result(launch, result)

    def slots(self, job: Job) -> Job:
        """The job as the sandbox and the spec see it; by default a process per rank."""
        return job

    def output_names(self, slots: Job) -> list[str]:
        """The capture file of each process the launcher starts, in slot order."""
        return [f"rank{r}.out" for r in range(slots.world_size)]

    def inherited_fds(self, slots: Job, containment: Containment, outputs: list[CappedOutput]) -> list[int]:
        """The parent's descriptors a forked process inherits, which it closes first."""
        return []

    def prepare(self, launch: Launch) -> None:  # noqa: B027 (a hook: most launchers need nothing more)
        """What the processes need besides the spec, written before they start."""

    @abstractmethod
    def start(self, launch: Launch, started: list[StartedRank]) -> None:
        """Start the processes, appending each to `started` as it starts, so
        that a failure half-way stops those already running. Each sentinel
        is this launch's to close."""

    def result(self, launch: Launch, supervised: LaunchResult) -> LaunchResult:
        """The launch's result, from what supervising the started processes saw."""
        return supervised


def _drain(captures: list[CappedOutput]) -> None:
    for capture in captures:
        capture.start()

"""Run the student's own launcher: the submission as `python FILE`, whose
`if __name__ == "__main__":` block starts the ranks itself
(autograder/rank/own_launcher.py), under the same deadline and clean-up as
the graded ranks.

The launcher starts as the graded ranks do: forked from this process where
they are (a command line's check, a warm grader's child), else from the
warm fork server; so neither it nor the processes it spawns import torch
again. On a GPU run it is a command of its own, as a CUDA program needs."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import torch.multiprocessing as mp

from ..rank import own_launcher
from ..rank.spec import RankSpec
from . import Job
from .capture import CappedOutput
from .contain import Containment
from .local import forked_fds, start_method, started_process
from .skeleton import Launch, Launcher
from .supervise import StartedRank, start_command


class OwnLauncher(Launcher):
    """One process, the student's launcher, with the ranks it starts in its process group."""

    drains_after_start = True  # it may be forked, as the graded ranks are

    def slots(self, job: Job) -> Job:
        return replace(job, world_size=1)

    def output_names(self, slots: Job) -> list[str]:
        return ["launcher.out"]

    def inherited_fds(self, slots: Job, containment: Containment, outputs: list[CappedOutput]) -> list[int]:
        return forked_fds(slots, containment, outputs)

    def start(self, launch: Launch, started: list[StartedRank]) -> None:
        started.append(_start(start_method(launch.job), launch.spec, launch.private_dir, launch.outputs[0].path))


def _start(method: str, spec: RankSpec, private_dir: Path, output_path: str) -> StartedRank:
    if method == "spawn":
        spec_path = private_dir / "spec.json"
        spec_path.write_text(spec.to_json())
        return start_command([sys.executable, "-m", "autograder.rank.own_launcher", str(spec_path)], output_path)
    process = mp.get_context(method).Process(target=own_launcher.run, args=(spec, True))
    process.start()
    return started_process(process)

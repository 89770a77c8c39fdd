"""Run the student's own launcher: the submission as `python FILE`, whose
`if __name__ == "__main__":` block starts the ranks itself
(autograder/rank/own_launcher.py), under the same deadline and clean-up as
the graded ranks.

The launcher is forked from the warm fork server the graded ranks come from,
so neither it nor the processes it spawns import torch again; on a GPU run it
is a command of its own, as a CUDA program needs."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch.multiprocessing as mp

from ..rank import own_launcher
from ..rank.spec import RankSpec
from ..schema.run import LaunchResult
from . import Job
from .capture import CappedOutput
from .contain import Containment
from .local import started_process, warm_method
from .supervise import StartedRank, start_command, start_error, stop_all, supervise


def launch_own(job: Job, private_dir: Path) -> LaunchResult:
    """One process, the launcher, with the ranks it starts in its process group."""
    private_dir.mkdir()
    one_process = replace(job, world_size=1)
    containment = Containment(one_process, private_dir)
    capture = CappedOutput(str(private_dir / "launcher.out"))
    spec = RankSpec.for_run(one_process, private_dir, containment, [capture.path])
    capture.start()
    started_at = time.monotonic()
    try:
        started = _start(warm_method(job), spec, private_dir, capture.path)
    except Exception as error:  # e.g. out of memory or processes
        stop_all([], [capture])
        return start_error(started_at, error, containment)
    try:
        return supervise([started], [capture], spec, started_at, job.timeout_s, containment)
    finally:
        os.close(started.sentinel)


def _start(method: str, spec: RankSpec, private_dir: Path, output_path: str) -> StartedRank:
    if method == "spawn":
        spec_path = private_dir / "spec.json"
        spec_path.write_text(spec.to_json())
        return start_command([sys.executable, "-m", "autograder.rank.own_launcher", str(spec_path)], output_path)
    process = mp.get_context(method).Process(target=own_launcher.run, args=(spec, True))
    process.start()
    started = started_process(process)
    return replace(started, sentinel=os.dup(started.sentinel))  # closed here, as a command's pidfd is

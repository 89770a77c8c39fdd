"""The process launcher: each rank a fresh `python -m autograder.rank`,
started from its command line as an agent on another host would start it.

Slower to start than the multiprocessing launcher (every rank imports torch
itself), but it needs nothing from this process but the spec file, so it is
the shape that torchrun- and Slurm-started ranks take.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..rank.spec import RankSpec
from ..schema.run import LaunchResult
from . import Job, Launcher
from .capture import CappedOutput
from .contain import Containment
from .supervise import StartedRank, start_command, start_error, stop_all, supervise


class ProcessLauncher(Launcher):
    kind = "process"

    def launch(self, job: Job, private_dir: Path) -> LaunchResult:
        containment = Containment(job, private_dir)
        captures = [CappedOutput(str(private_dir / f"rank{r}.out")) for r in range(job.world_size)]
        spec = RankSpec.for_run(job, private_dir, containment, [c.path for c in captures])
        spec_path = private_dir / "spec.json"
        spec_path.write_text(spec.to_json())
        for capture in captures:
            capture.start()
        started_at = time.monotonic()
        ranks: list[StartedRank] = []
        try:
            try:
                for rank in range(job.world_size):
                    argv = [sys.executable, "-m", "autograder.rank", str(spec_path), "--rank", str(rank)]
                    ranks.append(start_command(argv, spec.output_paths[rank]))
            except Exception as error:  # e.g. out of memory or processes
                stop_all(ranks, captures)
                return start_error(started_at, error, containment)
            return supervise(ranks, captures, spec, started_at, job.timeout_s, containment)
        finally:
            for started in ranks:
                os.close(started.sentinel)

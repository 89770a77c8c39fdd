"""The process launcher: each rank a fresh `python -m autograder.rank`,
started from its command line as an agent on another host would start it.

Slower to start than the multiprocessing launcher (every rank imports torch
itself), but it needs nothing from this process but the spec file, so it is
the shape that torchrun- and Slurm-started ranks take.
"""

from __future__ import annotations

import sys

from .skeleton import Launch, Launcher
from .supervise import StartedRank, start_command


class ProcessLauncher(Launcher):
    kind = "process"

    def start(self, launch: Launch, started: list[StartedRank]) -> None:
        spec_path = launch.private_dir / "spec.json"
        spec_path.write_text(launch.spec.to_json())
        for rank in range(launch.job.world_size):
            argv = [sys.executable, "-m", "autograder.rank", str(spec_path), "--rank", str(rank)]
            started.append(start_command(argv, launch.spec.output_paths[rank]))

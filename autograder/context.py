"""The run context: everything about one grading run, built once and passed
to every stage. No stage builds paths of its own."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WORLD_SIZE = 2
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RunContext:
    exercise: str
    world_size: int
    backend: str  # resolved: "gloo" or "nccl"
    hide_gpus: bool  # a gloo run on a GPU machine: ranks see no GPU
    timeout_s: float
    run_dir: Path
    is_notebook: bool
    module_file_name: str
    fork_from_here: bool  # this process has run no torch computation, so ranks may fork from it

    @property
    def workdir(self) -> Path:
        """The ranks' working directory; files left here were written by the ranks."""
        return self.run_dir / "work"

    @property
    def code_dir(self) -> Path:
        return self.run_dir / "code"

    @property
    def module_path(self) -> Path:
        return self.code_dir / self.module_file_name

    @property
    def private_dir(self) -> Path:
        """Grader-only files: records, rendezvous store, output pipes, stacks."""
        return self.run_dir / "private"

    @property
    def store_path(self) -> Path:
        return self.private_dir / "store"

    def record_path(self, rank: int) -> Path:
        return self.private_dir / f"rank{rank}.jsonl"

    def output_path(self, rank: int) -> Path:
        return self.private_dir / f"rank{rank}.out"

    def stack_path(self, rank: int) -> Path:
        return self.private_dir / f"rank{rank}.stack"

    def make_dirs(self) -> None:
        for path in (self.workdir, self.code_dir, self.private_dir):
            os.makedirs(path, exist_ok=True)

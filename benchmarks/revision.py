"""An earlier revision of this repository, checked out beside it for a
benchmark to compare with: `with checked_out("REV") as tree: ...` grades
with `python -m autograder` run in `tree` (its package comes first on the
path there), with this virtual environment."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def checked_out(revision: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=ROOT, check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)

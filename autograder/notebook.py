"""Checking from a notebook: the grader runs in a child process, so nothing a
submission does (a crash, os._exit, C++ warnings on stderr, a hang) can reach
the kernel or its cell output.

    from autograder.notebook import check
    check("linear_regression_ddp.py", exercise="linear_regression")
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .context import DEFAULT_TIMEOUT_S, DEFAULT_WORLD_SIZE
from .reports import json_report
from .verdict import Report

# The grader's own deadline, plus time to start Python and write the report.
STARTUP_MARGIN_S = 30
_cache: dict[tuple, Report] = {}


class GradingFailed(RuntimeError):
    """The grader itself could not produce a report (exit status 2)."""


def _fingerprint(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def run(path: str | os.PathLike, exercise: str, world_size: int = DEFAULT_WORLD_SIZE, backend: str = "auto",
        timeout_s: float = DEFAULT_TIMEOUT_S) -> Report:
    """Grade in a child `python -m autograder check`; the same file and settings are graded once per kernel."""
    path = Path(path)
    key = (str(path.resolve()), _fingerprint(path), exercise, world_size, backend, timeout_s)
    if key not in _cache:
        _cache[key] = _run_child(path, exercise, world_size, backend, timeout_s)
    return _cache[key]


def _run_child(path: Path, exercise: str, world_size: int, backend: str, timeout_s: float) -> Report:
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as folder:
        report_path = Path(folder) / "report.json"
        command = [sys.executable, "-m", "autograder", "check", str(path), "--exercise", exercise,
                   "--world-size", str(world_size), "--backend", backend, "--timeout", str(timeout_s),
                   "--json", str(report_path), "--quiet"]
        try:
            finished = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + STARTUP_MARGIN_S,
                                      stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise GradingFailed(f"The grader did not answer within {timeout_s + STARTUP_MARGIN_S:g} s.") from None
        if not report_path.exists():
            raise GradingFailed((finished.stderr or finished.stdout).strip() or f"The grader exited with status {finished.returncode}.")
        return json_report.from_dict(json.loads(report_path.read_text()))


def check(path: str | os.PathLike, exercise: str, world_size: int = DEFAULT_WORLD_SIZE, backend: str = "auto",
          timeout_s: float = DEFAULT_TIMEOUT_S) -> Report:
    """Check your code and show the report in the cell (the returned Report renders itself)."""
    return run(path, exercise, world_size, backend, timeout_s)

"""The kernel's side of grading: a client of the warm grader process
(autograder.notebook.server), and a cache of its reports per file content
and settings."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..judge.verdict import Report
from ..launch import DEFAULT_TIMEOUT_S, DEFAULT_WORLD_SIZE
from ..reports import json_report

# The grader's own deadline, plus time to start Python and write the report.
STARTUP_MARGIN_S = 60
_cache: dict[tuple, Report] = {}


class GradingFailed(RuntimeError):
    """The grader itself could not produce a report."""


class GraderServer:
    """A warm grader (autograder.notebook.server): one per kernel, restarted if it
    dies or stops answering; and one per notebook that nbgrader's autograde grades."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "autograder.notebook.server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )  # its own group, so it can be killed whole
        self.ready = False

    def _answer(self, timeout_s: float) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise GradingFailed(
                f"The grader did not answer within {timeout_s:g} s."
                if not ready
                else "The grader stopped unexpectedly."
            )
        return json.loads(line)

    def grade(self, request: dict, timeout_s: float) -> int:
        if not self.ready:
            self._answer(STARTUP_MARGIN_S)  # the "ready" line, once torch is imported
            self.ready = True
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._answer(timeout_s)["exit"]

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


_server: GraderServer | None = None


def _running_server() -> GraderServer:
    global _server
    if _server is None or not _server.alive():
        _server = GraderServer()
    return _server


def graded_outside_the_kernel() -> bool:
    """Under nbgrader's autograde, the grade cells' and the check cell's outputs come from
    a grading outside the kernel (nbgrader_ext.preprocessors.GradeDDPCellsOutOfKernel),
    which replaces them: a grading in the kernel would be thrown away."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


class ReportPending:
    """What check() shows while nbgrader autogrades: the report comes from outside the kernel."""

    TEXT = "nbgrader grades this program outside the notebook; the report of that grading replaces this one."

    def __repr__(self) -> str:
        return self.TEXT


def grading_key(path: str | os.PathLike, exercise: str, world_size: int, backend: str, timeout_s: float) -> tuple:
    """What makes two gradings the same: the file's content and the settings."""
    path = Path(path).resolve()
    content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return (str(path), content, exercise, world_size, backend, timeout_s)


def run(
    path: str | os.PathLike,
    exercise: str,
    world_size: int = DEFAULT_WORLD_SIZE,
    backend: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Report | ReportPending:
    """Grade outside the kernel; the same file content and settings are graded once per kernel."""
    if graded_outside_the_kernel():
        return ReportPending()
    key = grading_key(path, exercise, world_size, backend, timeout_s)
    if key not in _cache:
        _cache[key] = _grade_outside(Path(path).resolve(), exercise, world_size, backend, timeout_s)
    return _cache[key]


def _grade_outside(path: Path, exercise: str, world_size: int, backend: str, timeout_s: float) -> Report:
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as folder:
        report_path = Path(folder) / "report.json"
        request = {
            "path": str(path),
            "exercise": exercise,
            "world_size": world_size,
            "backend": backend,
            "timeout_s": timeout_s,
            "report_path": str(report_path),
        }
        _running_server().grade(request, timeout_s + STARTUP_MARGIN_S)
        error_path = Path(str(report_path) + ".error")
        if error_path.exists():
            raise GradingFailed(error_path.read_text())
        if not report_path.exists():
            raise GradingFailed("The grader wrote no report.")
        return json_report.from_dict(json.loads(report_path.read_text()))


def start() -> None:
    """Start the warm grader now, so the first check does not wait for torch to import."""
    if not graded_outside_the_kernel():
        _running_server()

"""The kernel's side of grading: a client of the warm grader process
(autograder.notebook.server), and a cache of its reports per file content
and settings."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
from pathlib import Path

from .._process import STARTUP_S, NoAnswer, WarmProcess
from ..judge.verdict import Report
from ..reports import json_report
from ..schema.run import DEFAULT_OPTIONS, RunOptions

# The grader's own deadline, plus time to start Python and write the report.
STARTUP_MARGIN_S = STARTUP_S
_cache: dict[tuple, Report] = {}


class GradingFailed(RuntimeError):
    """The grader itself could not produce a report."""


class GraderServer(WarmProcess):
    """A warm grader (autograder.notebook.server): one per kernel, restarted if it
    dies or stops answering; and one per notebook that nbgrader's autograde grades,
    or one per job of a class's autograde (socket_path: it answers there)."""

    module = "autograder.notebook.server"
    name = "the grader"

    def __init__(self, socket_path: str | None = None, env: dict[str, str] | None = None):
        super().__init__(*(["--socket", socket_path] if socket_path else []), env=env)

    def grade(self, request: dict, timeout_s: float) -> int:
        try:
            self.send(request)
            return self.answer(timeout_s)["exit"]
        except NoAnswer as error:
            raise GradingFailed(str(error)) from None


class SharedGraderServer(GraderServer):
    """A connection to the warm grader that a class's autograde keeps for its job.
    Stopping it hangs up, which kills a grading still running."""

    def __init__(self, socket_path: str):
        self.client = socket.socket(socket.AF_UNIX)
        self.client.connect(socket_path)
        self.requests, self.answers = self.client.makefile("w"), self.client.makefile("r")
        self.ready = False

    def alive(self) -> bool:
        return self.client.fileno() != -1

    def stop(self) -> None:
        for channel in (self.requests, self.answers, self.client):
            channel.close()


SOCKET_VARIABLE = "DDP_GRADER_SOCKET"  # set by a class's autograde: the shared warm grader of the job


def autograde_server() -> GraderServer:
    """The warm grader that grades one notebook under nbgrader's autograde."""
    path = os.environ.get(SOCKET_VARIABLE)
    if path:
        try:
            return SharedGraderServer(path)
        except OSError:  # it is gone: grade with a grader of this notebook's own
            pass
    return GraderServer()


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


def grading_key(path: str | os.PathLike, exercise: str, options: RunOptions) -> tuple:
    """What makes two gradings the same: the file's content and the options."""
    path = Path(path).resolve()
    content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return (str(path), content, exercise, options)


def grading_request(path: str | os.PathLike, exercise: str, options: RunOptions, report_path: str, **extra) -> dict:
    """One line to the warm grader: grade PATH with OPTIONS, write the report
    to REPORT_PATH. extra: own_launcher_in / own_launcher_out (server.py)."""
    return {"path": str(path), "exercise": exercise, "options": options.to_dict(), "report_path": report_path, **extra}


def run(path: str | os.PathLike, exercise: str, options: RunOptions = DEFAULT_OPTIONS) -> Report | ReportPending:
    """Grade outside the kernel; the same file content and options are graded once per kernel."""
    if graded_outside_the_kernel():
        return ReportPending()
    key = grading_key(path, exercise, options)
    if key not in _cache:
        _cache[key] = _grade_outside(Path(path).resolve(), exercise, options)
    return _cache[key]


def check(
    path: str | os.PathLike,
    exercise: str,
    world_size: int = DEFAULT_OPTIONS.world_size,
    backend: str = DEFAULT_OPTIONS.backend,
    timeout_s: float = DEFAULT_OPTIONS.timeout_s,
) -> Report | ReportPending:
    """A notebook's check(...): the options a student may choose, by name."""
    return run(path, exercise, RunOptions(world_size=world_size, backend=backend, timeout_s=timeout_s))


def _grade_outside(path: Path, exercise: str, options: RunOptions) -> Report:
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as folder:
        report_path = Path(folder) / "report.json"
        request = grading_request(path, exercise, options, str(report_path))
        _running_server().grade(request, options.timeout_s + STARTUP_MARGIN_S)
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

"""A warm grader for notebook kernels: `python -m autograder.notebook.server`.

It imports torch once, then reads one JSON request per line on stdin and
answers one JSON line on stdout. Each request is graded in a process forked
from this one, which has run no torch computation, so the ranks fork from it
too and start in milliseconds. A kernel keeps one server: checks after the
first skip the seconds of interpreter and torch start-up.

With `--socket PATH` it answers on a Unix socket instead, one client at a
time: `python -m autograder autograde` keeps one such server per job, and
every student's nbgrader it runs connects to it (DDP_GRADER_SOCKET), so a
class pays for the start-up once per job, not once per student. A grading
whose client goes away is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path

import torch  # noqa: F401  (the point of the server: imported once, before any fork)
import torch._dynamo  # noqa: F401

from .._process import die_with_parent
from ..errors import CannotGrade
from ..grading import judge, record
from ..judge.records import OwnLauncherRun, own_launcher_dict, own_launcher_from_dict
from ..launch.local import adopt_fork_server, start_fork_server
from ..reports import json_report
from ..schema.run import RunOptions


def _grade_in_child(request: dict, client: socket.socket | None = None) -> int:
    """Fork, grade, write the report; the exit status is the CLI's.

    own_launcher_out / own_launcher_in (optional): a file to save the run of
    the student's own launcher in, and one to reuse it from, so that the
    gradings of one file at two world sizes run it once.
    """
    pid = os.fork()
    if pid == 0:
        status = 2
        try:
            adopt_fork_server()
            # This process has run no torch computation: the ranks fork from it.
            options = replace(RunOptions.from_dict(request["options"]), fork_from_here=True)
            sub, run = record(
                request["path"], request["exercise"], options, _saved_own_launcher(request.get("own_launcher_in"))
            )
            if request.get("own_launcher_out") and run.own_launcher is not None:
                saved = own_launcher_dict(run.own_launcher, run.own_launcher_ranks)
                Path(request["own_launcher_out"]).write_text(json.dumps(saved))
            report = judge(sub, run)
            json_report.write(report, request["report_path"])
            status = 0 if report.passed else 1
        except CannotGrade as error:
            with open(request["report_path"] + ".error", "w") as f:
                f.write(error.message + (f" {error.hint}" if error.hint else ""))
        except BaseException as error:  # never let a grading bug take the server down
            with open(request["report_path"] + ".error", "w") as f:
                f.write(f"The grader failed: {type(error).__name__}: {error}")
        finally:
            os._exit(status)
    if client is not None:
        _wait_or_kill(pid, client)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


def _wait_or_kill(pid: int, client: socket.socket) -> None:
    """Until the grading ends, or its client hangs up: then it is killed (its ranks die with it)."""
    ended = os.pidfd_open(pid)
    watched = [ended, client]
    try:
        while client in watched and ended not in select.select(watched, [], [])[0]:
            try:
                gone = client.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                os.kill(pid, signal.SIGKILL)
            watched.remove(client)  # gone, or a request sent early, which waits its turn
    finally:
        os.close(ended)


def _saved_own_launcher(path: str | None) -> OwnLauncherRun | None:
    if not path or not Path(path).is_file():
        return None
    return own_launcher_from_dict(json.loads(Path(path).read_text()))


def _answer_requests(requests, answers, client: socket.socket | None = None) -> None:
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in requests:
        status = _grade_in_child(json.loads(line), client)
        print(json.dumps({"exit": status}), file=answers, flush=True)


def serve(socket_path: str | None = None) -> None:
    die_with_parent()  # the kernel, or the class's autograde, that started us
    # The answers go out on an fd of their own, which no process this one
    # starts by exec (the fork server) gets: nothing else may write there.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    start_fork_server()  # for the student's own launcher, warm before the first grading needs it
    if socket_path is None:
        _answer_requests(sys.stdin, answers)
        return
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(socket_path)
    os.chmod(socket_path, 0o600)
    listener.listen()
    print(json.dumps({"ready": True}), file=answers, flush=True)
    while True:
        client, _ = listener.accept()
        # A client gone mid-grading (its nbgrader killed) cannot take the answer: the next one is served.
        with contextlib.suppress(OSError), client, client.makefile("r") as requests, client.makefile("w") as replies:
            _answer_requests(requests, replies, client)


if __name__ == "__main__":
    serve(sys.argv[sys.argv.index("--socket") + 1] if "--socket" in sys.argv else None)

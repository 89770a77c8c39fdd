"""A warm nbgrader for a class's autograde: one process per job that has imported
nbgrader (about two seconds of every student's grading on a 2-core machine) and
forks one `nbgrader ARGS` per student from there.

Each child is what `python -m nbgrader ARGS` would be: the same application,
config and preprocessors, run in the course directory with the job's
environment. Its output goes to a log file, and it leads a session of its own,
so that a timeout kills it and all it started; it dies with this process.

Requests and answers are JSON lines, on stdin and stdout:
    {"argv": [...], "cwd": DIR, "env": {...}, "log": PATH}  ->  {"pid": N}, then {"exit": CODE}
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import traceback

from .. import _process


class WarmNbgrader(_process.WarmProcess):
    """The client: a class's autograde keeps one per job."""

    module = "autograder.nbgrader_ext.warm_nbgrader"
    name = "the job's nbgrader"
    child: int | None = None

    def run(self, argv: list[str], cwd: str, env: dict[str, str], log: str, timeout_s: float) -> int | None:
        """`nbgrader ARGV`'s exit status; None when it ran past `timeout_s` and was killed.
        Raises NoAnswer if this process itself stopped."""
        self.send({"argv": argv, "cwd": cwd, "env": env, "log": log})
        self.child = self.answer(_process.STARTUP_S)["pid"]
        try:
            return self.answer(timeout_s)["exit"]
        except _process.NoAnswer as error:
            if error.timed_out:
                return None
            raise
        finally:
            self.child = None

    def stop(self) -> None:
        if self.child is not None:
            try:
                os.killpg(self.child, signal.SIGKILL)  # its session: nbgrader and its kernel
            except ProcessLookupError:
                pass
        super().stop()


def _nbgrader(request: dict) -> int:
    """In the forked child: become `nbgrader ARGV` and return its exit status."""
    os.setsid()
    _process.die_with_parent()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin, sys.stdout, sys.stderr = open(0), open(1, "w", buffering=1), open(2, "w", buffering=1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = ["nbgrader", *request["argv"]]
    from nbgrader.apps.nbgraderapp import NbGraderApp  # imported already, by serve()

    try:
        NbGraderApp.launch_instance()
        return 0
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else int(done.code is not None)
    except BaseException:
        traceback.print_exc()
        return 1


def _import_nbgrader() -> None:
    """The point of this process: what `nbgrader autograde` imports on its way to
    the first notebook, imported once, before any fork."""
    import jupyter_client.manager  # noqa: F401
    import nbclient  # noqa: F401
    import nbconvert  # noqa: F401
    import nbgrader.apps.autogradeapp  # noqa: F401
    import nbgrader.apps.nbgraderapp  # noqa: F401

    from ..reports import html  # noqa: F401  (matplotlib: the check cell's report, with its plots)
    from . import kernel, preprocessors  # noqa: F401  (the course's own steps, named in nbgrader_config.py)


def serve() -> None:
    _process.die_with_parent()  # the class's autograde that started it
    _import_nbgrader()
    answers = os.fdopen(os.dup(1), "w")  # its children get fd 1 as their log, never this
    os.dup2(2, 1)
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.close(answers.fileno())  # nothing the student's grading runs may answer for it
            status = 1
            try:
                status = _nbgrader(request)
                atexit._run_exitfuncs()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        print(json.dumps({"pid": pid}), file=answers, flush=True)
        _, wait_status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(wait_status)}), file=answers, flush=True)


if __name__ == "__main__":
    serve()

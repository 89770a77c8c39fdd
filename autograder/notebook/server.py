"""A warm grader for notebook kernels: `python -m autograder.notebook.server`.

It imports torch once, then reads one JSON request per line on stdin and
answers one JSON line on stdout. Each request is graded in a process forked
from this one, which has run no torch computation, so the ranks fork from it
too and start in milliseconds. A kernel keeps one server: checks after the
first skip the seconds of interpreter and torch start-up.
"""

from __future__ import annotations

import json
import os
import sys

import torch  # noqa: F401  (the point of the server: imported once, before any fork)
import torch._dynamo  # noqa: F401

from .._process import die_with_parent
from ..errors import CannotGrade
from ..grading import grade
from ..reports import json_report


def _grade_in_child(request: dict) -> int:
    """Fork, grade, write the report; the exit status is the CLI's."""
    pid = os.fork()
    if pid == 0:
        status = 2
        try:
            report = grade(
                request["path"],
                request["exercise"],
                request["world_size"],
                request["backend"],
                request["timeout_s"],
                fork_from_here=True,
                sandbox=request.get("sandbox", "auto"),  # a student's check: where the machine allows
            )
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
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


def serve() -> None:
    die_with_parent()  # the kernel that started us
    answers = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write on the answer channel
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        status = _grade_in_child(json.loads(line))
        print(json.dumps({"exit": status}), file=answers, flush=True)


if __name__ == "__main__":
    serve()

"""Helpers for the course's nbgrader grade cells.

Each graded check of a DDP exercise is its own grade cell:

    from autograder.course import require
    require("linear_regression_ddp.py", "linear_regression", "distributed_sampler")
    ### BEGIN HIDDEN TESTS
    require("linear_regression_ddp.py", "linear_regression", "distributed_sampler", world_size=3)
    ### END HIDDEN TESTS

`require` grades through `autograder.notebook.run`, which runs the ranks in a
child process and caches the report per file content and settings, so the DDP
job runs once per world size for the whole notebook, not once per cell, and
nothing the student's ranks do (crash, os._exit, warnings on stderr) can reach
the kernel or the cell's output.

nbgrader scores a test cell 0 when it raises or writes anything to stderr, and
treats a cell's displayed value as partial credit, so `require` prints nothing,
returns None, and fails by raising `CheckFailed` (an AssertionError) whose
rendered traceback is the check's message and hint in plain words: no stack
frames, so the feedback shows no test code, hidden or not.
"""
from __future__ import annotations

import os
from pathlib import Path

from .context import DEFAULT_TIMEOUT_S, DEFAULT_WORLD_SIZE
from .verdict import FAILED

# Not graded: gpu_device. On a CPU-only grading machine it is always skipped
# (skipped = full points), so a cell for it would give a point to every
# notebook, blank ones included, and the total would depend on the machine.
# check() still shows it to students who run on GPUs.
UNGRADED_CHECKS = ("gpu_device",)

_failures: dict[tuple, str] = {}  # the grader could not run: don't retry in every cell


class CheckFailed(AssertionError):
    """A graded check failed. IPython shows `lines` instead of a traceback."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self.lines[0]}", *self.lines[1:]]


# The check list lives in autograder.checks, which imports torch; grade cells
# need none of it (the report carries titles and points), so it is read lazily.

def __getattr__(name):
    if name == "GRADED_CHECKS":  # the ids with a grade cell, in the report's order
        from .checks import CHECKS

        return tuple(c.id for c in CHECKS if c.id not in UNGRADED_CHECKS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def max_points(check_id: str) -> float:
    """The points a check is worth (the grade cell's points)."""
    return _check(check_id).points


def title(check_id: str) -> str:
    return _check(check_id).title


def _check(check_id: str):
    from .checks import CHECKS

    for item in CHECKS:
        if item.id == check_id:
            return item
    raise ValueError(f"Unknown check {check_id!r}; known checks: {', '.join(c.id for c in CHECKS)}.")


def _ranks(world_size: int) -> str:
    return "1 rank" if world_size == 1 else f"{world_size} ranks"


def require(path: str | os.PathLike, exercise: str, check_id: str, world_size: int = DEFAULT_WORLD_SIZE,
            backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Pass silently when the check passed or did not apply (skipped);
    raise CheckFailed with the check's message and hint when it failed."""
    from .notebook import GradingFailed, grading_key, run

    path = Path(path)
    if not path.is_file():
        heading = f"{title(check_id)} (checked with {_ranks(world_size)})"
        raise CheckFailed([f"{heading}: there is no file {path.name}.",
                           f"Hint: run the %%writefile {path.name} cell above, which writes your program to that file."])
    key = grading_key(path, exercise, world_size, backend, timeout_s)
    if key not in _failures:
        try:
            report = run(path, exercise, world_size=world_size, backend=backend, timeout_s=timeout_s)
        except GradingFailed as error:
            _failures[key] = str(error).strip() or "The grader stopped without a report."
    if key in _failures:
        raise CheckFailed([f"{title(check_id)} (checked with {_ranks(world_size)}): the grader could not run your program.",
                           _failures[key]])
    verdict = next((v for v in report.checks if v.id == check_id), None)
    if verdict is None:
        raise ValueError(f"The {exercise} report has no check {check_id!r}.")
    heading = f"{verdict.title} (checked with {_ranks(world_size)})"
    if verdict.status != FAILED:
        return None
    lines = [f"{heading}: {verdict.message}"]
    if report.error and report.error not in verdict.message:
        # The check's message may refer to "the error above": put the run's error first.
        lines = [heading, f"The run: {report.error}", verdict.message]
    if verdict.hint:
        lines.append(f"Hint: {verdict.hint}")
    raise CheckFailed(lines)

"""Helpers for the course's nbgrader grade cells.

Each graded check of a DDP exercise is its own grade cell:

    from autograder.notebook.grade_cells import require
    require(PROGRAM, EXERCISE, CHECK_ID)
    ### BEGIN HIDDEN TESTS
    require(PROGRAM, EXERCISE, CHECK_ID, world_size=3)
    ### END HIDDEN TESTS

`require` grades through `autograder.notebook.client.run`, which runs the ranks in a
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

from ..judge.checks import by_id
from ..judge.verdict import FAILED
from ..schema.run import DEFAULT_OPTIONS, RunOptions
from ..wording import plural

_failures: dict[tuple, str] = {}  # the grader could not run: don't retry in every cell


class CheckFailed(AssertionError):
    """A graded check failed. IPython shows `lines` instead of a traceback."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self.lines[0]}", *self.lines[1:]]


def require(
    path: str | os.PathLike,
    exercise: str,
    check_id: str,
    world_size: int = DEFAULT_OPTIONS.world_size,
    backend: str = DEFAULT_OPTIONS.backend,
    timeout_s: float = DEFAULT_OPTIONS.timeout_s,
) -> None:
    """Pass silently when the check passed or did not apply (skipped);
    raise CheckFailed with the check's message and hint when it failed."""
    from .client import GradingFailed, graded_outside_the_kernel, grading_key, run

    path = Path(path)
    title = heading(check_id, world_size)
    if graded_outside_the_kernel():  # fails closed: only the out-of-kernel grading can clear this cell
        raise CheckFailed(
            [
                f"{title}: nbgrader grades this cell outside the notebook.",
                "If your feedback shows this, the course's nbgrader_config.py lacks the GradeDDPCellsOutOfKernel "
                "step: tell your instructor.",
            ]
        )
    if not path.is_file():
        raise CheckFailed(
            [
                f"{title}: there is no file {path.name}.",
                f"Hint: run the %%writefile {path.name} cell above, which writes your program to that file.",
            ]
        )
    options = RunOptions(world_size=world_size, backend=backend, timeout_s=timeout_s)
    key = grading_key(path, exercise, options)
    if key not in _failures:
        try:
            report = run(path, exercise, options)
        except GradingFailed as error:
            _failures[key] = str(error).strip() or "The grader stopped without a report."
    if key in _failures:
        raise CheckFailed([f"{title}: the grader could not run your program.", _failures[key]])
    lines = failure_lines(report, check_id, world_size)
    if lines is not None:
        raise CheckFailed(lines)


def heading(check_id: str, world_size: int) -> str:
    return f"{by_id(check_id).title} (checked with {plural(world_size, 'rank')})"


def failure_lines(report, check_id: str, world_size: int) -> list[str] | None:
    """What a grade cell shows when the check failed: its message and hint in
    plain words. None when it passed or did not apply (skipped)."""
    verdict = next((v for v in report.checks if v.id == check_id), None)
    if verdict is None:
        raise ValueError(f"The {report.exercise} report has no check {check_id!r}.")
    if verdict.status != FAILED:
        return None
    title = heading(check_id, world_size)
    lines = [f"{title}: {verdict.message}"]
    if report.error and report.error not in verdict.message:
        # The check's message may refer to "the error above": put the run's error first.
        lines = [title, f"The run: {report.error}", verdict.message]
    if verdict.hint:
        lines.append(f"Hint: {verdict.hint}")
    return lines

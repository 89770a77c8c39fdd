"""The course's nbgrader preprocessors, as nbgrader runs them: on a notebook node."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output
from nbgrader.preprocessors import Execute

from autograder.nbgrader_ext.preprocessors import (
    LESSON_DEMO_TAG,
    NOT_RUN_WHILE_GRADING,
    ClearHiddenTestTracebacks,
    ExecuteLeavingOutLessonDemos,
    error_output,
)

GRADE_CELL = """from autograder.notebook.grade_cells import require
require("p.py", "linear_regression", "cleanup")
### BEGIN HIDDEN TESTS
require("p.py", "linear_regression", "cleanup", world_size=3)
### END HIDDEN TESTS"""


def _graded(source: str, traceback: list[str], grade: bool = True) -> nbformat.NotebookNode:
    cell = new_code_cell(source, outputs=[new_output("error", ename="CheckFailed", evalue="x", traceback=traceback)])
    cell.metadata["nbgrader"] = {
        "grade": grade,
        "grade_id": "lr_cleanup",
        "locked": True,
        "points": 1,
        "schema_version": 3,
        "solution": False,
    }
    return new_notebook(cells=[cell])


def test_tracebacks_lose_the_hidden_lines_and_keep_the_message():
    traceback = [
        "\x1b[0;31mCheckFailed\x1b[0m Traceback",
        '----> 4 require("p.py", "linear_regression", "cleanup", world_size=3)\n      5 ### END HIDDEN TESTS',
        "CheckFailed: Process group destroyed (checked with 3 ranks): rank 2 returned without destroying it.",
    ]
    notebook, _ = ClearHiddenTestTracebacks().preprocess(_graded(GRADE_CELL, traceback), {})
    shown = "\n".join(notebook.cells[0].outputs[0].traceback)
    assert "world_size=3" not in shown and "END HIDDEN TESTS" not in shown
    assert "rank 2 returned without destroying it" in shown and "Traceback" in shown


def test_cells_that_are_not_graded_or_have_no_hidden_tests_are_left_alone():
    traceback = ['----> 4 require("p.py", "linear_regression", "cleanup", world_size=3)']
    for notebook in (_graded(GRADE_CELL, traceback, grade=False), _graded("assert False", traceback)):
        cleaned, _ = ClearHiddenTestTracebacks().preprocess(notebook, {})
        assert cleaned.cells[0].outputs[0].traceback == traceback


def test_the_delimiters_are_configurable_as_nbgrader_s_own_are():
    preprocessor = ClearHiddenTestTracebacks(begin_test_delimeter="BEGIN SECRET", end_test_delimeter="END SECRET")
    assert preprocessor.hidden_lines("a\n# BEGIN SECRET\nb\n# END SECRET\nc") == {"# BEGIN SECRET", "b", "# END SECRET"}


def test_a_grade_cell_s_error_holds_the_whole_message_not_only_the_check_s_title():
    """A crashed run's cell starts with the title alone; whoever reads the error's value (a
    gradebook summary, nbgrader's own views) gets the run's error and the hint too."""
    lines = ["Only rank 0 saves checkpoints (checked with 2 ranks)", "The run: Rank 0 failed: boom", "Not reached."]
    output = error_output([*lines, "Hint: Fix the error reported above, then check again."])
    assert output.evalue.splitlines()[:3] == lines and output.evalue.endswith("then check again.")
    assert output.traceback[0] == f"CheckFailed: {lines[0]}"


@pytest.mark.parametrize(
    "kind, runs",
    [
        ({"grade": False, "solution": False}, False),  # the lesson's demonstration: left out
        ({"grade": True, "solution": False, "points": 1}, True),  # a test cell a student tagged: runs
        ({"grade": False, "solution": True}, True),  # an answer cell a student tagged: runs
    ],
)
def test_only_a_lesson_s_tagged_demonstration_is_left_out_of_grading(monkeypatch, kind, runs):
    ran = []
    monkeypatch.setattr(
        Execute, "preprocess_cell", lambda self, cell, resources, index: (ran.append(index), (cell, resources))[1]
    )
    cell = new_code_cell("import subprocess; subprocess.run(['sleep', '60'])", metadata={"tags": [LESSON_DEMO_TAG]})
    cell.metadata["nbgrader"] = {"grade_id": "demo", "locked": True, "schema_version": 3, **kind}
    untagged = new_code_cell("x = 1")
    executor = ExecuteLeavingOutLessonDemos()
    for index, each in enumerate([cell, untagged]):
        executor.preprocess_cell(each, {}, index)
    assert ran == ([0, 1] if runs else [1])
    if not runs:
        assert [o["text"] for o in cell.outputs] == [NOT_RUN_WHILE_GRADING] and cell.source.startswith(
            "import subprocess"
        )

"""Checking from a notebook kernel: the warm grader outside the kernel, its
cache, and that nothing a submission does reaches the caller."""

from __future__ import annotations

import shutil
import time

import pytest
from conftest import ROOT, SOLUTIONS, robustness_case

from autograder import notebook

CASES = ROOT / "tests" / "robustness"


@pytest.fixture
def solution_copy(tmp_path):
    copy = tmp_path / "linear_regression_ddp.py"
    shutil.copy(SOLUTIONS / "linear_regression_ddp.py", copy)
    return copy


def test_check_grades_outside_and_caches_by_content(solution_copy, capfd):
    report = notebook.check(solution_copy, "linear_regression")
    assert report.passed and report.score == report.max_score
    started = time.monotonic()
    assert notebook.check(solution_copy, "linear_regression") is report  # same content and settings: not graded again
    assert time.monotonic() - started < 0.5
    solution_copy.write_text(solution_copy.read_text().replace("EPOCHS = 20", "EPOCHS = 2"))
    assert notebook.check(solution_copy, "linear_regression") is not report
    assert capfd.readouterr() == ("", "")  # nothing on the kernel's stdout or stderr


@pytest.mark.parametrize("case", ["os_exit.py", "segfault.py", "prints_megabytes.py"])
def test_a_crashing_or_noisy_submission_cannot_reach_the_kernel(tmp_path, case, capfd):
    report = notebook.check(robustness_case(case, tmp_path), "linear_regression")
    assert report.ranks  # it was graded, with a report to show
    assert capfd.readouterr().err == ""


def test_a_hang_ends_at_the_deadline_and_the_server_keeps_working(tmp_path, solution_copy):
    shutil.copy(CASES / "hang_recv.py", tmp_path / "hang_recv.py")
    report = notebook.check(tmp_path / "hang_recv.py", "linear_regression", timeout_s=5)
    assert "did not finish within the time limit" in report.error
    assert notebook.check(solution_copy, "linear_regression").passed


def test_a_dead_server_is_replaced(solution_copy):
    notebook.client._running_server().stop()
    assert notebook.check(solution_copy, "linear_regression", world_size=3).passed


def test_input_that_cannot_be_graded_raises_a_clear_error(tmp_path):
    with pytest.raises(notebook.client.GradingFailed, match="There is no file at"):
        notebook.check(tmp_path / "missing.py", "linear_regression")


def test_importing_the_notebook_helpers_leaves_torch_out_of_the_kernel():
    import subprocess
    import sys

    code = (
        "import sys; from autograder.notebook import check; import autograder.reports.html, "
        "autograder.notebook.grade_cells; "
        "print('torch' in sys.modules)"
    )  # showing a report or loading the grade-cell helpers neither
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"

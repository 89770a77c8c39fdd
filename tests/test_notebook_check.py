"""Checking from a notebook kernel: the warm grader outside the kernel, its
cache, and that nothing a submission does reaches the caller."""

from __future__ import annotations

import shutil
import time

import pytest
from conftest import ROOT, SOLUTIONS, robustness_case

from autograder import notebook
from autograder.notebook.client import grading_request
from autograder.schema.run import RunOptions

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


def test_under_autograde_the_kernel_grades_nothing_and_the_grade_cells_fail_closed(solution_copy, monkeypatch):
    """nbgrader's autograde replaces these outputs with a grading outside the kernel: a grading in
    the kernel would be thrown away. A course without that step gives no points, never all of them."""
    from autograder.notebook.grade_cells import CheckFailed, require

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(notebook.client, "GraderServer", None)  # starting one would raise
    monkeypatch.setattr(notebook.client, "_server", None)
    assert isinstance(notebook.check(solution_copy, "linear_regression"), notebook.client.ReportPending)
    with pytest.raises(CheckFailed, match="lacks the GradeDDPCellsOutOfKernel step"):
        require(solution_copy, "linear_regression", "process_group")


def own_launcher_verdict(server, program, folder, world_size: int, reuse_from=None, save_to=None):
    from autograder.reports import json_report

    report_path = folder / f"report-{world_size}.json"
    own = {"own_launcher_in": str(reuse_from or ""), "own_launcher_out": str(save_to or "")}
    options = RunOptions(world_size=world_size)
    request = grading_request(program, "linear_regression", options, str(report_path), **own)
    server.grade(request, 300)
    return json_report.from_dict(__import__("json").loads(report_path.read_text())).check("launcher")


def test_a_second_world_size_reuses_the_own_launcher_run_of_the_first(solution_copy, tmp_path):
    """The student's launcher starts the same ranks at every world size: graded twice, it runs once."""
    import json

    server, saved = notebook.client.GraderServer(), tmp_path / "own_launcher.json"
    try:
        assert own_launcher_verdict(server, solution_copy, tmp_path, 2, save_to=saved).status == "passed"
        run = json.loads(saved.read_text())
        assert [e["kind"] for e in run["own_launcher"]["events"]].count("spawn_called") == 1
        # Reused, not run again: a saved run whose launcher asked for no ranks fails the 3-rank grading.
        for event in run["own_launcher"]["events"]:
            if event["kind"] == "spawn_called":
                event["nprocs"], event["gpus"] = 0, 0
        saved.write_text(json.dumps(run))
        verdict = own_launcher_verdict(server, solution_copy, tmp_path, 3, reuse_from=saved)
        assert verdict.status == "failed" and "asked for 0 processes" in verdict.message
        assert own_launcher_verdict(server, solution_copy, tmp_path, 3).status == "passed"  # none saved: run here
    finally:
        server.stop()


def test_a_shared_grader_kills_the_grading_of_a_client_that_hangs_up_and_serves_the_next(tmp_path, solution_copy):
    """A class's autograde keeps one grader per job: a student's nbgrader killed mid-grading
    takes its grading down with it, and the next student's nbgrader is served."""
    from conftest import processes_mentioning

    socket_path = str(tmp_path / "grader.sock")
    server = notebook.client.GraderServer(socket_path)
    try:
        server.wait_ready()
        idle = {p.pid for p in processes_mentioning(socket_path)}
        shutil.copy(CASES / "hang_recv.py", tmp_path / "hang_recv.py")
        client = notebook.client.SharedGraderServer(socket_path)
        program, report_path = tmp_path / "hang_recv.py", str(tmp_path / "hang.json")
        client.send(grading_request(program, "linear_regression", RunOptions(timeout_s=300), report_path))
        deadline = time.monotonic() + 30
        while len(processes_mentioning(socket_path)) < len(idle) + 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # until its grading has started its ranks
        assert len(processes_mentioning(socket_path)) >= len(idle) + 3
        client.stop()
        deadline = time.monotonic() + 10
        while {p.pid for p in processes_mentioning(socket_path)} != idle and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {p.pid for p in processes_mentioning(socket_path)} == idle
        next_client = notebook.client.SharedGraderServer(socket_path)
        assert own_launcher_verdict(next_client, solution_copy, tmp_path, 2).status == "passed"
    finally:
        server.stop()

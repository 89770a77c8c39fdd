"""Every hang, crash and piece of bad input ends in a clear verdict within
the deadline, through the real command line, and leaves no process behind."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, processes_mentioning, robustness_case, run_cli

from autograder.exercises import EXERCISES

CASES = ROOT / "tests" / "robustness"
# A run that stops early fails every check it did not get past, gpu_device
# included: "does not apply" is only known of a run that finished.
ALL_CHECKS = set(EXERCISES["linear_regression"].checks) - {"gpu_device"}  # 0 of 0 on the CPU: never failed
AFTER_GROUP = ALL_CHECKS - {"process_group"}
SLACK_S = 25  # interpreter start, torch import, killing; the machine is shared


def grade_case(
    tmp_path: Path, case: str, *extra: str, timeout: float = 60
) -> tuple[subprocess.CompletedProcess, dict, float]:
    """Grade a copy of the case (a unique path, to find its processes), and check none is left."""
    submission = robustness_case(case, tmp_path)
    report_path = tmp_path / "report.json"
    started = time.monotonic()
    result = run_cli(
        "check",
        str(submission),
        "--exercise",
        "linear_regression",
        "--timeout",
        str(timeout),
        "--json",
        str(report_path),
        *extra,
    )
    elapsed = time.monotonic() - started
    time.sleep(0.5)
    assert not processes_mentioning(str(submission)), "grading left processes running"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return result, report, elapsed


def failed(report: dict) -> set[str]:
    return {c["id"] for c in report["checks"] if c["status"] == "failed"}


@pytest.mark.parametrize(
    "case, stuck_line",
    [
        ("hang_recv.py", "dist.recv(buffer"),
        ("one_sided_collective.py", "dist.all_reduce(torch.ones(1))"),
    ],
)
def test_hang_is_stopped_at_the_deadline_with_each_ranks_stack(tmp_path, case, stuck_line):
    result, report, elapsed = grade_case(tmp_path, case, timeout=6)
    assert result.returncode == 1
    assert 6 <= elapsed < 6 + SLACK_S
    assert "did not finish within the time limit" in report["error"]
    assert [r["status"] for r in report["ranks"]] == ["hung", "hung"]
    assert stuck_line in report["ranks"][0]["error"]
    assert f"{case}" in report["ranks"][0]["stack"]  # the faulthandler dump of the hung rank
    assert failed(report) == AFTER_GROUP


def test_a_failing_rank_stops_the_others_at_once_and_shows_its_traceback(tmp_path):
    result, report, elapsed = grade_case(tmp_path, "rank_raises.py", timeout=120)
    assert result.returncode == 1
    assert elapsed < SLACK_S, "the other rank should be stopped at once, not at the deadline"
    assert report["error"].startswith("Rank 1 failed: ValueError: batch 7 has the wrong shape")
    assert "line 8, in check_batch" in report["error"]
    assert report["ranks"][1]["status"] == "failed"
    # rank 0 is stopped, or fails first on its own when rank 1's connection closes
    assert report["ranks"][0]["status"] in ("stopped", "failed")
    assert "Rank 1 failed" in result.stdout


@pytest.mark.parametrize(
    "case, message",
    [
        ("os_exit.py", "Rank 1 failed: the process exited with status 3"),
        ("segfault.py", "Rank 0 failed: the process was killed by signal 11"),
    ],
)
def test_a_rank_that_dies_without_an_exception_is_reported(tmp_path, case, message):
    result, report, elapsed = grade_case(tmp_path, case, timeout=120)
    assert result.returncode == 1 and elapsed < SLACK_S
    assert report["error"].startswith(message)


@pytest.mark.parametrize(
    "case, message, failing",
    [
        (
            "world_size_4.py",
            "init_process_group was called with world_size=4, but the grader started 2 ranks",
            ALL_CHECKS,
        ),
        ("nccl_on_cpu.py", "asked for the nccl backend, but this run has no GPU", ALL_CHECKS),
        ("set_device_on_cpu.py", "torch.cuda.set_device(rank)", ALL_CHECKS),
        ("spawn_at_import.py", 'Put the mp.spawn call under `if __name__ == "__main__":`', ALL_CHECKS),
        ("main_wrong_signature.py", "main(rank) cannot be called as main(rank, world_size)", ALL_CHECKS),
    ],
)
def test_code_that_cannot_work_under_the_grader_fails_fast_with_a_reason(tmp_path, case, message, failing):
    result, report, elapsed = grade_case(tmp_path, case, timeout=120)
    assert result.returncode == 1 and elapsed < SLACK_S
    assert message in report["error"] + " " + report["error_hint"]
    assert failed(report) == failing
    assert report["score"] == 0


def test_set_device_without_a_gpu_gets_a_hint(tmp_path):
    _, report, _ = grade_case(tmp_path, "set_device_on_cpu.py")
    assert "torch.cuda.is_available()" in report["error_hint"]


@pytest.mark.parametrize(
    "case, message",
    [
        ("syntax_error.py", "Python cannot read your code: expected ':' (line 5)"),
        ("no_main.py", "No function main(rank, world_size) is defined"),
    ],
)
def test_code_that_does_not_run_is_graded_zero_without_starting_ranks(tmp_path, case, message):
    result, report, elapsed = grade_case(tmp_path, case)
    assert result.returncode == 1
    assert report["error"].startswith(message) and report["ranks"] == []
    assert report["score"] == 0 and not report["passed"]


def test_processes_a_rank_started_are_killed_too(tmp_path):
    result, report, _ = grade_case(tmp_path, "leaves_child_process.py", timeout=5)
    assert result.returncode == 1
    time.sleep(0.5)
    assert not [p for p in processes_mentioning("sleep") if p.cmdline() == ["sleep", "600"]]


def test_output_of_megabytes_is_capped_and_grading_still_works(tmp_path):
    result, report, elapsed = grade_case(tmp_path, "prints_megabytes.py")
    assert result.returncode == 1  # every rank printing its chatter is itself a logging mistake
    assert failed(report) == {"rank0_logs"}
    for rank in report["ranks"]:
        assert rank["output_bytes"] >= 20_000_000 and rank["output_truncated"]
        assert len(rank["output"]) < 30_000
        assert "bytes of output not shown" in rank["output"]
    assert len(result.stdout) < 20_000


def test_hard_coded_port_gradings_run_side_by_side(tmp_path):
    """The tutorial's MASTER_PORT=12355 in three gradings at once: the grader owns the rendezvous."""
    runs = []
    for number in range(3):
        submission = robustness_case("hardcoded_port.py", tmp_path / f"student{number}")
        runs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autograder",
                    "check",
                    str(submission),
                    "--exercise",
                    "linear_regression",
                    "--quiet",
                ],
                cwd=ROOT,
            )
        )
    assert [run.wait(timeout=240) for run in runs] == [0, 0, 0]


def test_a_launcher_that_never_ends_fails_alone_within_the_timeout(tmp_path):
    """The own-launcher run gets what the graded run left of the timeout, not a second timeout."""
    # Time for the graded run (about 5 s) to finish first; the launcher's share of it is waited out.
    result, report, elapsed = grade_case(tmp_path, "launcher_never_ends.py", timeout=25)
    assert result.returncode == 1
    assert failed(report) == {"launcher"}
    assert "did not finish in time" in json.dumps(report["checks"])
    assert elapsed < 25 + SLACK_S


def test_a_notebook_with_magics_and_cell_functions_grades_like_a_script(tmp_path):
    result, report, _ = grade_case(tmp_path, "notebook_solution.ipynb")
    assert result.returncode == 0, result.stdout
    assert report["passed"] and report["score"] == report["max_score"]
    assert "Can't get attribute" not in json.dumps(report)


def test_sigterm_to_the_grader_kills_its_ranks(tmp_path):
    submission = tmp_path / "hang_recv.py"
    shutil.copy(CASES / "hang_recv.py", submission)
    grader = subprocess.Popen(
        [sys.executable, "-m", "autograder", "check", str(submission), "--exercise", "linear_regression", "--quiet"],
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while len(processes_mentioning(str(submission))) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the grader and both ranks are up
    grader.send_signal(signal.SIGTERM)
    assert grader.wait(timeout=20) != 0
    time.sleep(0.5)
    assert not processes_mentioning(str(submission))

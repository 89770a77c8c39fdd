"""Attacks on the grader, through the real command line: each one gains
nothing over the honest version of the same program, or is reported as
tampering, and the sandbox holds with nothing left afterwards. Each runs
twice: under a grader that is root (a user per rank) and under one that is
not (a user namespace; tests/unprivileged.py).

The attack programs are the tamper/ entries of tests/mistakes.py.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import conftest
import pytest
import unprivileged
from conftest import ROOT, processes_mentioning, run_cli
from mistakes import write_submission

from autograder import grading
from autograder.errors import CannotGrade
from autograder.launch.sandbox import why_unavailable
from autograder.schema.run import Limits, RunOptions

NO_SANDBOX = why_unavailable()
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")


@dataclass
class Grader:
    folder: Path  # where the submissions and reports go
    run_cli: Callable


@pytest.fixture(params=["root", "unprivileged"])
def grader(request, tmp_path):
    """The CLI as root, and as a user who is not."""
    if request.param == "root":
        yield Grader(tmp_path, conftest.run_cli)
        return
    folder = unprivileged.folder()
    yield Grader(folder, partial(unprivileged.run_cli, cwd=folder))
    shutil.rmtree(folder, ignore_errors=True)


def grade(name: str, grader: Grader, *extra: str, exercise: str = "linear_regression") -> dict:
    """The JSON report of one submission, graded by the CLI; nothing of it may be left running."""
    path = write_submission(name, grader.folder)
    report_path = grader.folder / f"{path.stem}.json"
    done = grader.run_cli("check", str(path), "--exercise", exercise, "--json", str(report_path), *extra, timeout=200)
    assert report_path.exists(), done.stdout + done.stderr
    assert not processes_mentioning(path.name)
    return json.loads(report_path.read_text())


def assert_tampering(report: dict, says: str) -> None:
    assert report["error"].startswith("Tampering detected:"), report["error"]
    assert says in report["error"]
    assert report["score"] == 0
    assert all(c["message"].startswith("Not checked: tampering detected") for c in report["checks"] if c["max_points"])


@needs_sandbox
def test_records_appended_to_files_count_for_nothing(grader):
    # What the blank main they pad out would get: test_checks grades that row (blank_main) to 0.
    assert grade("tamper/writes_record_files", grader)["score"] == 0


@needs_sandbox
def test_facts_recorded_through_the_probes_state_are_tampering(grader):
    # A process group in the records, and no packet between the ranks.
    assert_tampering(grade("tamper/forges_through_gc", grader), "packets passed between them")


@needs_sandbox
@pytest.mark.parametrize(
    "attack",
    [
        "hides_other_ranks_saves",
        "saves_through_libc",
        "saves_through_subprocess",  # a writer gone before the holder reads of it: the mount still names the rank
    ],
)
def test_a_save_the_probes_do_not_see_is_still_seen(grader, attack):
    # Saving on every rank openly loses points (test_checks' row all_ranks_save); hidden, it loses them all.
    assert_tampering(grade(f"tamper/{attack}", grader), "rank 1 wrote linear_regression.pt")


@needs_sandbox
def test_a_snapshot_a_torchrun_worker_writes_unseen_is_still_seen(grader):
    """Each torchrun worker has a sandbox slot of its own, as a rank of mp.spawn does: the kernel names the writer."""
    report = grade("tamper/snapshot_from_every_worker_unseen", grader, exercise="fault_tolerance")
    assert_tampering(report, "rank 1 wrote rank1_snapshot.pt")


@needs_sandbox
def test_killing_the_torchrun_worker_template_gains_nothing(grader):
    """A worker that kills the process that reports how the workers ended
    leaves their ends unknown: counted as stopped, never as finished."""
    assert grade("tamper/kills_the_worker_template", grader, exercise="fault_tolerance")["score"] == 0


@needs_sandbox
def test_a_rank_cannot_write_through_another_ranks_folder(grader):
    report = grade("tamper/saves_through_another_ranks_folder", grader)
    assert report["error"].startswith("Rank 1 failed: PermissionError: no other process let this rank write in")


@needs_sandbox
def test_a_second_record_stream_for_a_rank_is_tampering(grader):
    assert_tampering(grade("tamper/speaks_for_rank_0", grader), "claimed to be rank 0")


@needs_sandbox
def test_a_daemon_neither_outlives_the_run_nor_touches_the_report(grader):
    report = grade("tamper/daemon_rewrites_report", grader)
    assert report["score"] == report["max_score"]  # as the honest program
    time.sleep(5)  # the daemon meant to rewrite the report 3 s after the grader's exit
    assert json.loads((grader.folder / "daemon_rewrites_report.json").read_text()) == report
    assert not processes_mentioning("daemon_rewrites_report")


@needs_sandbox
def test_the_grader_cannot_be_stopped_from_a_rank(grader, request):
    started = time.monotonic()
    # Time for the graded run to finish; what the stopped processes leave is waited out.
    report = grade("tamper/stops_the_grader", grader, "--timeout", "20")
    if "unprivileged" in request.node.name:
        # One user outside: rank 0 may stop rank 1, and so its own run; never the grader.
        assert report["error"] is None or report["error"].startswith("The run did not finish within the time limit")
    else:
        assert report["error"] is None
    assert time.monotonic() - started < 60


class Listener:
    """A TCP listener outside the run, that notes every connection."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped:
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            connection.close()

    def close(self):
        self.stopped = True
        self.thread.join()
        self.socket.close()


@needs_sandbox
def test_a_rank_sees_no_course_file_writes_nowhere_else_and_reaches_no_one(grader):
    listener = Listener()
    try:
        path = write_submission("tamper/looks_outside", grader.folder)
        path.write_text(path.read_text().replace("LISTENER_PORT", str(listener.port)))
        with socket.create_connection(("127.0.0.1", listener.port)):  # the listener works
            pass
        report_path = grader.folder / "r.json"
        grader.run_cli(
            "check", str(path), "--exercise", "linear_regression", "--json", str(report_path), "--show-output"
        )
        report = json.loads(report_path.read_text())
    finally:
        listener.close()
    output = "\n".join(rank["output"] for rank in report["ranks"])
    assert "LEAKED" not in output and "WROTE" not in output and "CONNECTED" not in output, output
    assert listener.connections == 1  # ours alone
    for leak in (ROOT / "LEAK", Path("/etc/ddp-leak"), Path("/var/tmp/ddp-leak"), Path("/root/ddp-leak")):
        assert not leak.exists()
    assert report["score"] == report["max_score"]  # as the honest program


@needs_sandbox
def test_a_memory_hog_is_stopped_at_the_limit_with_a_verdict_that_says_so(grader):
    report = grade("tamper/hogs_memory", grader, "--memory-limit", "1")
    assert "rank 0 went over the 1 GiB memory limit" in report["error"]
    assert "Use less memory" in report["error_hint"]


@needs_sandbox
def test_a_process_flood_ends_at_the_limit_and_leaves_nothing(grader):
    report = grade("tamper/floods_processes", grader)
    assert "Resource temporarily unavailable" in report["error"]
    assert "limit on processes" in report["error_hint"]
    assert not processes_mentioning("61.5")


@needs_sandbox
def test_a_rank_that_spins_is_stopped_at_its_cpu_time(tmp_path, no_leftover_ranks):
    path = write_submission("tamper/spins", tmp_path)
    report = grading.grade(path, "linear_regression", RunOptions(limits=Limits(cpu_seconds=2), sandbox="required"))
    assert "rank 0 used up its 2 s of CPU time, so the kernel stopped it" in report.error
    assert "no loop runs forever" in report.error_hint


def test_instructor_grading_refuses_to_run_without_a_sandbox(monkeypatch, tmp_path):
    monkeypatch.setattr(grading, "why_unavailable", lambda: "this system has no Linux namespaces")
    with pytest.raises(CannotGrade, match="Cannot grade in a sandbox here: this system has no Linux namespaces"):
        grading.record(
            ROOT / "solutions" / "linear_regression_ddp.py", "linear_regression", RunOptions(sandbox="required")
        )


def test_unsandboxed_grading_says_so_in_the_report(tmp_path, no_leftover_ranks):
    done = run_cli(
        "check",
        str(ROOT / "solutions" / "linear_regression_ddp.py"),
        "--exercise",
        "linear_regression",
        "--unsafe-no-sandbox",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert "No sandbox: your code ran unconfined" in done.stdout
    assert "--unsafe-no-sandbox" in json.loads((tmp_path / "r.json").read_text())["unsandboxed"]

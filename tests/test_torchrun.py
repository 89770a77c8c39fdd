"""The torchrun launcher keeps the grader's promises: one deadline for all
three jobs, restarts included; nothing left running; a clear verdict for a
program that never resumes or crashes on every attempt; bad input refused
with a message; and attacks on the fault gain nothing."""

from __future__ import annotations

import json
import signal
import time

import pytest
from conftest import ROOT, failed_ids, run_cli
from mistakes import write_submission

from autograder import RunOptions, grading
from autograder.launch import torchrun as torchrun_launcher
from autograder.launch.sandbox import why_unavailable

FT = "fault_tolerance"
NEEDS_THE_RESTART = {"resumed", "resume_epoch", "optimizer_restored", "same_result"}
SLACK_S = 25  # interpreter starts, torch imports, killing; the machine is shared


def test_a_restart_that_never_resumes_ends_at_the_one_deadline(tmp_path, no_leftover_ranks):
    path = write_submission("robustness/torchrun_hangs_after_restart", tmp_path)
    started = time.monotonic()
    # Time for the reference job (about 5 s) and the faulted job's restart, not much more: it is waited out.
    report = grading.grade(path, FT, RunOptions(timeout_s=25))
    assert time.monotonic() - started < 25 + SLACK_S
    # The reference run finished; the restarted workers hung until the deadline, so the two-node run never ran.
    assert failed_ids(report) == NEEDS_THE_RESTART | {"snapshot_rank0"}
    resumed = report.check("resumed")
    assert "after the restart, rank" in resumed.message and "still running at the time limit" in resumed.message
    assert (
        "the two-node run did not run, because the time limit ran out first" in report.check("snapshot_rank0").message
    )


def test_a_crash_on_every_attempt_names_the_error_and_its_line(tmp_path, no_leftover_ranks):
    path = write_submission("robustness/torchrun_crashes_every_time", tmp_path)
    report_path = tmp_path / "report.json"
    done = run_cli("check", str(path), "--exercise", FT, "--json", str(report_path))
    assert done.returncode == 1, done.stderr
    report = json.loads(report_path.read_text())
    assert report["score"] == 0
    assert "RuntimeError: the data folder is empty" in report["error"]
    assert f"{path.name}, line " in report["error"]
    assert all(c["status"] == "failed" for c in report["checks"])


def test_bad_input_is_refused_with_a_message(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def main(:\n")
    done = run_cli("check", str(broken), "--exercise", FT)
    assert done.returncode == 1
    assert "Python cannot read your code" in done.stdout
    missing = run_cli("check", str(tmp_path / "nowhere.py"), "--exercise", FT)
    assert missing.returncode == 2 and "nowhere.py" in missing.stderr


def test_a_script_without_main_is_a_torchrun_program_too(tmp_path, no_leftover_ranks):
    """torchrun runs the file as a script: the grader asks for no main()."""
    script = tmp_path / "script.py"
    script.write_text('print("no process group here")\n')
    report = grading.grade(script, FT, RunOptions(timeout_s=60))
    assert "main" not in (report.error or "")
    assert "never joined a process group" in report.check("torchrun_env").message


def test_dodging_the_fault_gains_nothing(tmp_path, no_leftover_ranks):
    report = grading.grade(write_submission("tamper/dodges_the_fault", tmp_path), FT)
    assert NEEDS_THE_RESTART <= failed_ids(report)
    assert "finished before the grader's fault came" in report.check("resumed").message


@pytest.mark.skipif(why_unavailable() is not None, reason="without the sandbox every folder of the run is in sight")
def test_a_restarted_worker_sees_no_other_job_s_snapshot(tmp_path, no_leftover_ranks):
    """Each job runs in a run folder of its own: the faulted run cannot take the weights it must match."""
    report = grading.grade(write_submission("tamper/takes_another_jobs_snapshot", tmp_path), FT)
    assert report.passed, [(v.id, v.message) for v in report.checks if v.status == "failed"]


FACTS_OF_A_WORKER = """
import ctypes, json, os, signal, sys
facts = {
    "rank": os.environ["RANK"],
    "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    "sigint_python": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
}
fds = os.listdir("/proc/self/fd")  # one of them the listing's own, gone once it is read
facts["open_files"] = sorted(os.readlink(f"/proc/self/fd/{fd}") for fd in fds if os.path.exists(f"/proc/self/fd/{fd}"))
try:
    open(f"/proc/{os.getppid()}/mem", "rb").close()
    facts["starter_readable"] = True
except OSError:
    facts["starter_readable"] = False
print("FACTS " + json.dumps(facts), flush=True)
"""


def _facts(report) -> list[dict]:
    return [
        json.loads(line.split("FACTS ", 1)[1])
        for rank in report.ranks
        for line in rank.output.splitlines()
        if line.startswith("FACTS ")
    ]


def test_a_worker_starts_as_torchrun_s_own_command_would_start_it(tmp_path, no_leftover_ranks):
    """On CPU the workers are forked from a template of the agent, not exec'd
    (autograder/rank/worker_template.py): each still has Python's default
    signal handlers, is traceable as a fresh process is, and holds none of
    the agent's files (its records stream, its stack file, its output). In
    the sandbox, the process that forks the workers and reports how they
    ended is out of their reach."""
    script = tmp_path / "facts.py"
    script.write_text(FACTS_OF_A_WORKER)
    facts = _facts(grading.grade(script, FT, RunOptions(timeout_s=60)))
    assert sorted(f["rank"] for f in facts) == ["0", "1"]
    for fact in facts:
        assert fact["sigterm_default"] and fact["sigint_python"], fact
        assert fact["dumpable"] == 1, fact
        assert not any("agent" in name or name.endswith(".stack") for name in fact["open_files"]), fact
    if why_unavailable() is None:  # without the sandbox the workers may be root, who reads anything
        assert not any(f["starter_readable"] for f in facts), facts


def test_torchrun_stops_the_other_workers_when_one_fails(tmp_path, no_leftover_ranks):
    """When a worker fails, the agent stops the others with SIGTERM (in the
    sandbox, another user's processes: reached through the worker template),
    and how each ended is what the agent saw."""
    script = tmp_path / "one_fails.py"
    script.write_text('import os, sys, time\nif os.environ["RANK"] == "1":\n    sys.exit(3)\ntime.sleep(100)\n')
    started = time.monotonic()
    _, run = grading.record(script, FT, RunOptions(timeout_s=120))
    assert time.monotonic() - started < 60
    assert [w.outcome.exit_code for w in run.ranks] == [-signal.SIGTERM, 1]  # a SystemExit of a worker: 1


@pytest.mark.skipif(why_unavailable() is not None, reason="without the sandbox no slot names a writer")
def test_on_the_gpu_path_each_worker_is_exec_d_in_a_slot_of_its_own(tmp_path, monkeypatch, no_leftover_ranks):
    """A CUDA run starts the agents as commands and execs each worker in its
    slot (forced here on CPU): a correct program keeps every point, and the
    kernel still names the worker that wrote a file."""
    monkeypatch.setattr(torchrun_launcher, "_warm", lambda job: False)
    correct = tmp_path / "fault_tolerance.py"
    correct.write_text((ROOT / "solutions" / "fault_tolerance.py").read_text())
    report = grading.grade(correct, FT)
    assert report.passed, [(v.id, v.message) for v in report.checks if v.status == "failed"]
    report = grading.grade(write_submission("tamper/snapshot_from_every_worker_unseen", tmp_path), FT)
    assert "rank 1 wrote rank1_snapshot.pt, but its records show no such write" in report.error

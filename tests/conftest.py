"""Shared test helpers: where things are, and how to see leftover processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mistakes
import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
ROBUSTNESS = ROOT / "tests" / "robustness"
CHROMIUM = Path("/usr/bin/chromium")  # Debian's: .ci/run installs it
# The flags this machine's closed network needs (refused background connections otherwise).
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def robustness_case(case: str, folder: Path) -> Path:
    """A copy of the case in `folder`: a file of tests/robustness/, the entry
    robustness/<stem> of tests/mistakes.py, or else a solution."""
    name = f"robustness/{Path(case).stem}"
    if name in mistakes.SUBMISSIONS:
        return mistakes.write_submission(name, folder)
    source = ROBUSTNESS / case if (ROBUSTNESS / case).exists() else SOLUTIONS / case
    shutil.copy(source, folder / source.name)
    return folder / source.name


def failed_ids(report) -> set[str]:
    return {v.id for v in report.checks if v.status == "failed"}


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line mentions `text` (ranks forked by the
    grader's CLI share its command line)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and any(
                text in part for part in process.info["cmdline"] or ()
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return [p for p in found if p.pid != os.getpid()]


def rank_processes() -> set[int]:
    """This process's descendants that lead their own process group: ranks, as
    the grader starts them (a fork server, if any, stays in our group)."""
    mine = os.getpgid(0)
    ranks = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if os.getpgid(child.pid) != mine and child.status() != psutil.STATUS_ZOMBIE:
                ranks.add(child.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return ranks


@pytest.fixture
def no_leftover_ranks():
    """Fails the test if grading left any rank (or anything a rank started) alive."""
    before = rank_processes()
    yield
    deadline = time.monotonic() + 3
    while (left := rank_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left running after grading: {sorted(left)}"


def run_cli(*args: str, timeout: float = 300, cwd: Path = ROOT, **popen) -> subprocess.CompletedProcess:
    """`python -m autograder ...` as a user runs it (`popen`: who that user is, and their environment)."""
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        **popen,
    )

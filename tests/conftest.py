"""Shared test helpers: where things are, how to see leftover processes, and
the two tiers of the suite.

The tiers are declared here and nowhere else. A test starts processes (ranks,
kernels, nbgrader, chromium, Slurm) when it uses one of PROCESS_FIXTURES or
lives in one of PROCESS_MODULES; it then gets the `processes` marker, and
`make quick` (pytest -m "not processes") leaves it out. Every other test is
forbidden to start a process: the `quick_tier_starts_no_process` guard fails
it, naming this file, so the quick tier cannot slowly fill with slow tests.
"""

from __future__ import annotations

import _posixsubprocess
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mistakes
import psutil
import pytest
import torch  # noqa: F401  its first import asks ldconfig for CUDA's libraries: done here, before any test's guard

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


# Fixtures that start processes: any test that uses one is in the slow tier.
PROCESS_FIXTURES = frozenset(
    {
        "no_leftover_ranks",  # every test that grades for real asks for it
        "graded",  # test_checks: the catalogue, graded
        "correct",  # test_reports: real reports
        "no_sampler",
        "any_report",  # one of the three, by name
        "mistakes",
        "bundle",  # test_gradescope: the zip, built and run
        "grader",  # test_tamper: the CLI as root and as nobody
        "solution_copy",  # test_notebook_check: the warm grader
        "regenerated",  # test_release: nbgrader generate_assignment
    }
)
# Modules whose every test starts processes, beyond what their fixtures say.
PROCESS_MODULES = frozenset(
    {
        "test_browser",
        "test_class_grading",
        "test_exchange",  # Unix users running nbgrader
        "test_gpu",
        "test_hub",
        "test_kernel_sandbox",
        "test_launchers",
        "test_nbgrader",
        "test_notebook_check",  # the warm grader, a server process
        "test_robustness",
        "test_slurm",
        "test_torchrun",
    }
)


def starts_processes(item) -> bool:
    return bool(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))) or item.module.__name__ in PROCESS_MODULES


def pytest_collection_modifyitems(items):
    for item in items:
        if starts_processes(item):
            item.add_marker(pytest.mark.processes)


class StartsAProcess(AssertionError):
    pass


@pytest.fixture(autouse=True)
def quick_tier_starts_no_process(request, monkeypatch):
    """A test of the quick tier that starts a process fails: it belongs in the slow tier."""
    if request.node.get_closest_marker("processes"):
        yield
        return

    def refuse(*args, **kwargs):
        raise StartsAProcess(
            f"{request.node.nodeid} starts a process, so it belongs to the slow tier: give it a fixture of "
            "PROCESS_FIXTURES (no_leftover_ranks, for a real grading) or add its module to PROCESS_MODULES, "
            "in tests/conftest.py"
        )

    for module, name in ((os, "fork"), (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp")):
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(subprocess, "_fork_exec", refuse)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", refuse)  # multiprocessing's spawn
    yield


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

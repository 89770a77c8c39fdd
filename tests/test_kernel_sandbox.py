"""The kernel nbgrader's autograde runs a student's notebook in: it sees the
student's folder and nothing else of the course, writes nowhere else, and
leaves no process behind; for an instructor who is root, and for one who is
not (a user namespace: tests/unprivileged.py)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import unprivileged
from conftest import ROOT

from autograder._files import chown_tree
from autograder.launch.contain import EXCHANGE_VARIABLE
from autograder.launch.sandbox import privileged, why_unavailable
from autograder.linux import NESTED_UID
from autograder.nbgrader_ext.kernel import KERNEL_UID, SandboxedKernelManager

NO_SANDBOX = why_unavailable() or (None if privileged() else "the tests do not run as root")
pytestmark = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
GRADER_MARK = "ddp-kernel-grader"  # in the command line of the process that starts the kernel

PROBE = """
import os
seen = []
for path in SECRETS:
    try:
        open(path).read()
        seen.append("READ " + path)
    except OSError:
        pass
for path in ["mine.txt", *SECRETS, "/etc/ddp-kernel-leak"]:
    try:
        open(path, "a").write("x")
        seen.append("WROTE " + path)
    except OSError:
        pass
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time
        time.sleep(300)
    os._exit(0)
from autograder.launch.sandbox import why_unavailable
pids = [pid for pid in os.listdir("/proc") if pid.isdigit()]
grader_seen = any("ddp-kernel-grader" in open(f"/proc/{pid}/cmdline").read() for pid in pids)
print(os.getuid(), seen, grader_seen, why_unavailable())
"""


def probe_kernel(folder: str, secrets: list[str]) -> str:
    """What the PROBE prints, run in a sandboxed kernel started in `folder`."""
    manager = SandboxedKernelManager()
    manager.start_kernel(cwd=folder)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        printed = []
        code = f"SECRETS = {secrets!r}\n{PROBE}"
        client.execute_interactive(code, timeout=60, output_hook=lambda m: printed.append(m["content"].get("text", "")))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return "".join(printed).strip()


def probe_as_nobody(folder: Path, secrets: list[str]) -> str:
    """probe_kernel, by an instructor who is not root."""
    code = f"from test_kernel_sandbox import probe_kernel; print(probe_kernel({str(folder)!r}, {secrets!r}))"
    done = unprivileged.run(
        [sys.executable, "-c", code, GRADER_MARK], cwd=ROOT / "tests", home=folder.parents[3] / "home"
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def live_processes_of(uid: int) -> list[psutil.Process]:
    """Live processes of a user (a zombie is dead, waiting to be reaped)."""
    return [
        p
        for p in psutil.process_iter(["uids", "status"])
        if p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.parametrize("instructor", ["root", "not root"])
def test_the_autograding_kernel_sees_its_folder_only_and_leaves_nothing(instructor, monkeypatch):
    course = unprivileged.folder() / "course"
    # A hub's exchange, where /tmp is not (the sandbox's /tmp is a fresh one anyway).
    exchange = Path(tempfile.mkdtemp(prefix="ddp-exchange-", dir="/var/tmp"))
    try:
        folder = course / "autograded" / "mallory" / "linear_regression"
        folder.mkdir(parents=True)
        (course / "source").mkdir()
        bobs = exchange / "ddp-course" / "inbound" / "bob+linear_regression+x"
        bobs.mkdir(parents=True)
        monkeypatch.setenv(EXCHANGE_VARIABLE, str(exchange))
        secrets = [course / "gradebook.db", course / "source" / "solution.py", course / "autograded" / "bob.ipynb"]
        secrets.append(bobs / "linear_regression.ipynb")
        for secret in secrets:
            secret.write_text("secret")
        names = [str(s) for s in secrets]
        if instructor == "root":
            sys.argv.append(GRADER_MARK)  # pytest's own command line: what the kernel must not see
            try:
                printed, kernel_uid, outside_uid = probe_kernel(str(folder), names), KERNEL_UID, KERNEL_UID
            finally:
                sys.argv.remove(GRADER_MARK)
        else:  # the instructor's course is theirs, secrets and all: only the sandbox hides them
            for top in (course.parent, exchange):
                chown_tree(top, unprivileged.NOBODY, unprivileged.NOBODY)
            printed, kernel_uid, outside_uid = probe_as_nobody(folder, names), NESTED_UID, unprivileged.NOBODY
        # It sees no process of the grader, and its own check() can still sandbox its runs (a user namespace).
        assert printed == f"{kernel_uid} ['WROTE mine.txt'] False None"
        assert (folder / "mine.txt").read_text() == "x"
        assert all(secret.read_text() == "secret" for secret in secrets)
        deadline = time.monotonic() + 10  # a killed process takes a moment to die on a busy machine
        while live_processes_of(outside_uid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not live_processes_of(outside_uid)  # the daemon went with the kernel
    finally:
        shutil.rmtree(course.parent, ignore_errors=True)
        shutil.rmtree(exchange, ignore_errors=True)

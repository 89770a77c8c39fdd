"""The kernel nbgrader's autograde runs a student's notebook in: it sees the
student's folder and nothing else of the course, writes nowhere else, and
leaves no process behind."""

from __future__ import annotations

import time

import psutil
import pytest

from autograder.launch.sandbox import privileged, why_unavailable
from autograder.nbgrader_ext.kernel import KERNEL_UID, SandboxedKernelManager

NO_SANDBOX = why_unavailable() or (None if privileged() else "the tests do not run as root")
pytestmark = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")

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
grader_seen = any("pytest" in open(f"/proc/{pid}/cmdline").read() for pid in pids)
print(os.getuid(), seen, grader_seen, why_unavailable())
"""


def kernel_processes() -> list[psutil.Process]:
    """Live processes of the kernel's user (a zombie is dead, waiting to be reaped)."""
    return [
        p
        for p in psutil.process_iter(["uids", "status"])
        if p.info["uids"] and p.info["uids"].real == KERNEL_UID and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


def test_the_autograding_kernel_sees_its_folder_only_and_leaves_nothing(tmp_path):
    course = tmp_path / "course"
    folder = course / "autograded" / "mallory" / "linear_regression"
    folder.mkdir(parents=True)
    (course / "source").mkdir()
    secrets = [course / "gradebook.db", course / "source" / "solution.py", course / "autograded" / "bob.ipynb"]
    for secret in secrets:
        secret.write_text("secret")
    manager = SandboxedKernelManager()
    manager.start_kernel(cwd=str(folder))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        printed = []
        code = f"SECRETS = {[str(s) for s in secrets]!r}\n{PROBE}"
        client.execute_interactive(code, timeout=60, output_hook=lambda m: printed.append(m["content"].get("text", "")))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    # It sees no process of the grader, and its own check() can still sandbox its runs (a user namespace).
    assert "".join(printed).strip() == f"{KERNEL_UID} ['WROTE mine.txt'] False None"
    assert (folder / "mine.txt").read_text() == "x"
    assert all(secret.read_text() == "secret" for secret in secrets)
    time.sleep(0.5)
    assert not kernel_processes()  # the daemon went with the kernel

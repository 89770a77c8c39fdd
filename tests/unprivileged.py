"""The grader as a user who is not root, on a machine whose tests run as root.

That grader has no users of its own to give the ranks; its sandbox is a user
namespace (autograder/launch/sandbox.py). The command runs as `nobody`, in a
mount namespace of its own where a home folder that only root may enter is
a bare tmpfs with Python, the venv and the course mounted back, as an
instructor's machine would have them readable.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import conftest
from conftest import ROOT

from autograder.linux import CLONE_NEWNS, MS_BIND, MS_PRIVATE, MS_REC, mount, unshare

NOBODY = 65534


def folder() -> Path:
    """A fresh folder that `nobody` may write in (pytest's own are root's alone)."""
    made = Path(tempfile.mkdtemp(prefix="ddp-unprivileged-"))
    made.chmod(0o777)
    return made


def become_nobody() -> None:
    home = Path.home()
    needed = [Path(p) for p in {sys.base_prefix, sys.prefix, str(ROOT)}]
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    kept = [(path, os.open(path, os.O_PATH)) for path in needed if path.is_relative_to(home)]
    if not home.stat().st_mode & stat.S_IXOTH:
        mount("tmpfs", str(home), "tmpfs", 0, "mode=0755")
        for path, fd in kept:
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def environment(home: Path) -> dict[str, str]:
    """nobody's: the home given, and the venv's commands (nbgrader) on the PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return os.environ | {"HOME": str(home), "USER": "nobody", "PATH": path}


def run_cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m autograder ...` as `nobody` runs it."""
    return conftest.run_cli(*args, timeout=timeout, cwd=cwd, env=environment(cwd / "home"), preexec_fn=become_nobody)


def run(command: list[str], cwd: Path, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """A command as `nobody` runs it, from `cwd`, with `home` (a folder nobody may write) as its home."""
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=environment(home),
        stdin=subprocess.DEVNULL,
        preexec_fn=become_nobody,
    )

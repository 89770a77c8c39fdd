"""The kernel that nbgrader's autograde runs a student's notebook in, sandboxed.

`SandboxedKernelManager` (c.Execute.kernel_manager_class in nbgrader_config.py)
starts the usual kernel command under

    python -m autograder.nbgrader_ext.kernel -- KERNEL COMMAND...

in the student's autograded folder. That wrapper gives the kernel new mount,
network, IPC, UTS and PID namespaces and an unprivileged user: as root, a uid
of its own (KERNEL_UID); as an instructor who is not root, the only user of a
user namespace nested in the one that owns the others, which holds nothing
over them (the rank sandbox's way: autograder/launch/sandbox.py). Either way:

* it sees the student's folder (read-write) and Python, the venv and the
  grader's package (read-only); not the course (`gradebook.db`, `source/`,
  other students), not the grader's home, not the rest of /tmp;
* it talks to nbgrader over Unix sockets beside its connection file (ZeroMQ's
  ipc transport), and has a loopback of its own for the ranks of a check();
* whatever it starts, a daemon included, dies when it exits.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import weakref
from pathlib import Path

from jupyter_client.manager import KernelManager

from .._files import chown_tree
from .._process import die_with_parent
from ..launch.contain import hidden_paths, kept_paths
from ..launch.sandbox import UID_BASE, privileged, why_unavailable
from ..linux import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    be_init,
    become,
    become_nested,
    cover,
    loopback_up,
    make_rest_read_only,
    map_user,
    mount,
    unshare,
)
from ..notebook.client import SOCKET_VARIABLE
from ..schema.run import DEFAULT_LIMITS

KERNEL_UID = UID_BASE - 1  # below every rank's block, when the grader is root
KERNEL_SANDBOX_FIX = (
    "Run the autograde as root (sudo, say), or on a machine that lets users make user namespaces"
    " (sysctl kernel.unprivileged_userns_clone=1, or user.max_user_namespaces above 0):"
    " the sandbox gives each student's kernel a user of its own."
)


class KernelSandboxUnavailable(RuntimeError):
    """Student notebooks cannot be run in the sandbox on this machine, as this user: the message says why and
    what to do."""


def why_no_kernel_sandbox() -> str | None:
    """None when a student's notebook can run in the sandbox here (as root, or in a
    user namespace); else why not, for one line."""
    return why_unavailable()


def kernel_sandbox_refusal(reason: str) -> str:
    return f"The autograding kernel cannot run in a sandbox here: {reason}. {KERNEL_SANDBOX_FIX}"


class SandboxedKernelManager(KernelManager):
    """A kernel manager whose kernel runs in the sandbox, reached over ipc."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        folder = tempfile.mkdtemp(prefix="ddp-kernel-")
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        self.transport = "ipc"  # its sockets lie beside the connection file, which the sandbox shows
        self.connection_file = os.path.join(folder, "kernel.json")

    def format_kernel_cmd(self, extra_arguments=None):
        # Refused here, in nbgrader's process, so its log says why (the kernel's own stderr goes nowhere).
        reason = why_no_kernel_sandbox()
        if reason is not None:
            raise KernelSandboxUnavailable(kernel_sandbox_refusal(reason))
        command = super().format_kernel_cmd(extra_arguments)
        return [sys.executable, "-m", "autograder.nbgrader_ext.kernel", "--", *command]


def _course_of(folder: Path) -> list[Path]:
    """The nbgrader course whose autograded/<student>/<assignment> this is."""
    return [folder.parents[2]] if len(folder.parents) > 2 and folder.parents[1].name == "autograded" else []


def run(command: list[str], connection_file: str) -> int:
    # If nbgrader is killed, the kernel goes with it: this process, then init, then all in its namespace.
    die_with_parent()
    folder, sockets = Path.cwd(), Path(connection_file).parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is for the kernel (it reaches the whole group)
    as_root = privileged()
    if as_root:
        for writable in (folder, sockets):
            chown_tree(writable, KERNEL_UID, KERNEL_UID)
        unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
    else:  # the instructor's files are root's in here, and the kernel's once it is nested (become_nested)
        uid, gid = os.geteuid(), os.getegid()
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
        map_user(0, uid, gid)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    loopback_up()
    cover([*hidden_paths(), *_course_of(folder)], [*kept_paths(), folder, sockets], DEFAULT_LIMITS.tmp_bytes)
    make_rest_read_only(writable=(folder, sockets))
    init = os.fork()
    if init == 0:  # PID 1 of the kernel's namespace: when it is killed, everything in it ends
        be_init()
    # The kernel is not init's child: ipykernel takes a parent of PID 1 for an exited one.
    kernel = os.fork()
    if kernel == 0:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # A /proc of the kernel's PID namespace: the grader is not in it, and the
        # pids in it are the ones the kernel's own runs (check()) will see.
        unshare(CLONE_NEWNS)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if as_root:
            become(KERNEL_UID)
        else:
            become_nested()
        os.chdir(folder)
        os.environ.pop(SOCKET_VARIABLE, None)  # the class's warm grader is nbgrader's, never the student's
        os.execvp(command[0], command)
    _, status = os.waitpid(kernel, 0)
    os.kill(init, signal.SIGKILL)
    os.waitpid(init, 0)
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :]
    reason = why_no_kernel_sandbox()
    if reason is not None:
        print(kernel_sandbox_refusal(reason), file=sys.stderr)
        return 1
    connection_file = command[command.index("-f") + 1]
    return run(command, connection_file)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

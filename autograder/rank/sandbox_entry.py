"""The rank's side of the sandbox: the first thing a rank does after its
fork, before any student code runs, is to join the run's sandbox (see
autograder/launch/sandbox.py) and become its unprivileged user.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path

from ..linux import MS_NODEV, MS_NOEXEC, MS_NOSUID, become, become_nested, join_namespace, mount
from ..schema.run import Limits, SandboxView

RELAYED_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)  # the stack-dump request among them


def _fork_behind_a_relay() -> None:
    """Go on in a child; the parent stays behind as its relay."""
    child = os.fork()
    if child != 0:
        _relay(child)


def _relay(child: int) -> None:
    """The launcher's process (or a relay below it), outside the PID namespace:
    wait for the rank inside it and end the same way. Never returns."""
    for number in RELAYED_SIGNALS:
        signal.signal(number, lambda number, _frame: os.kill(child, number))
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):  # killed (at the memory limit, say): so is this process, as the launcher expects
        number = os.WTERMSIG(status)
        faulthandler.disable()  # the rank's own stack is dumped already; this one would only delay the exit
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # which have no handler to reset
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status))


def enter(view: SandboxView, rank: int, workdir: str) -> None:
    """Join the run's sandbox and become its unprivileged user for this rank.
    Called before any student code runs, single-threaded. Raises OSError.

    A process that joins a PID namespace cannot start threads (the kernel
    refuses), and one with threads cannot join a mount namespace. So the
    process the launcher started joins the PID namespace only (and the run's
    user namespace, where it has one) and stays outside as a relay: it forks
    the rank proper, which is born inside, single-threaded, and joins the
    rest. The relay passes on the launcher's signals and ends as the rank ends."""
    pid = str(os.getpid())
    if view.memory_cgroups:
        Path(view.memory_cgroups[rank], "cgroup.procs").write_text(pid)
    if view.pids_cgroup:
        Path(view.pids_cgroup, "cgroup.procs").write_text(pid)
    init = f"/proc/{view.init_pid}/ns"
    # Opened while the grader's /proc still shows the holder and init.
    names = ["pid", "net", "ipc", "uts"] + (["user"] if view.user_namespace else [])
    joined = {name: os.open(f"{init}/{name}", os.O_RDONLY) for name in names}
    joined["mnt"] = os.open(f"/proc/{view.holder_pid}/fd/{view.mount_namespaces[rank]}", os.O_RDONLY)
    if view.user_namespace:
        # First: it gives the capabilities in the run's namespaces that the rest need.
        # It takes a single-threaded process, which a fork always is.
        _fork_behind_a_relay()
        join_namespace(joined.pop("user"))
    join_namespace(joined.pop("pid"))
    _fork_behind_a_relay()
    for name in ("mnt", "net", "ipc", "uts"):
        join_namespace(joined.pop(name))
    # A /proc of the run's PID namespace: the grader and the other runs' processes are not in it.
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _take_limits(Limits(**view.limits), memory_counted=bool(view.memory_cgroups))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, not a kill
    os.umask(0)  # the ranks are different users, yet may share files as ranks of one user could
    if view.user_namespace:
        become_nested()  # a namespace of the rank's own, where it holds nothing over the run's
    else:
        become(view.uid_base + rank)
    os.environ.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    os.chdir(workdir)


def _take_limits(limits: Limits, memory_counted: bool) -> None:
    import resource

    wanted = [
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_NPROC, limits.processes, limits.processes),
        # SIGXCPU at the soft limit names the cause; SIGKILL at the hard one, should it be ignored.
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if not memory_counted:  # no cgroup to count memory: bound the heap at least
        wanted.append((resource.RLIMIT_DATA, limits.memory_bytes, limits.memory_bytes))
    for which, soft, hard in wanted:
        _, ceiling = resource.getrlimit(which)  # only root may raise it
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(which, (soft, hard))

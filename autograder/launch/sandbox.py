"""The sandbox of one run (Linux): what the ranks can see and do.

The grader forks a holder for the run. It makes new mount, network, IPC,
UTS and PID namespaces (and, when the grader is not root, a user namespace
that owns them) and forks the PID namespace's init. Each rank, as the first
thing it does after its fork, moves into its cgroups, joins those
namespaces, takes its limits and becomes an unprivileged user: as root, a
uid of its own per rank; otherwise the only uid of a user namespace of its
own, nested in the run's. So:

* the ranks share one network with loopback only (gloo and NCCL work, the
  world does not);
* the root file system is read-only, /tmp and /dev/shm are private size-capped
  tmpfs, the run's working folder is a copy on that tmpfs, and the course
  (solutions, hidden tests, gradebook, other students) is not there at all;
* whatever a rank starts lives in the PID namespace, and dies with its init;
* a rank cannot signal, trace or read the grader: it cannot see it (its /proc
  is the run's), and it is another user or holds no capability over it;
* each rank sees the run's folder through a mount of its own, and the holder
  hears every file closed after a write on each of those mounts (fanotify):
  so it knows which rank wrote a file, however it was written, even by a
  process that is gone before the holder reads of it.

Fork first, then join: the ranks still fork from a warm process.

After the ranks are gone the grader reads the evidence (`Evidence`): the
files left, with the ranks that wrote each, the loopback's traffic, and which
limits were hit. Then it tears the run down.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import select
import shutil
import signal
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from .._process import die_with_parent
from ..linux import (
    CAP_SETGID,
    CAP_SETUID,
    CAP_SYS_ADMIN,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    be_init,
    checked,
    cover,
    libc,
    loopback_up,
    make_rest_read_only,
    map_user,
    mount,
    read_or_empty,
    unshare,
)
from ..schema.run import Evidence, Limits, SandboxView
from .cgroups import counter, make_cgroup, memory_settings, oom_kills, own_cgroup, remove_cgroup

# Each run takes UID_BLOCK uids from UID_BASE up, the block chosen by the grader's pid.
UID_BASE, UID_BLOCK, UID_BLOCKS = 200_000, 32, 100_000


START_TIMEOUT_S = 10.0
END_TIMEOUT_S = 10.0


class SandboxUnavailable(Exception):
    """This machine or user cannot make the run's sandbox; the reason is the message."""


@dataclass(frozen=True)
class RunLayout:
    """The run's folder, as the launcher lays it out; the sandbox shows the ranks these parts of it."""

    run_dir: Path
    code_dir: Path  # the submission: read-only
    workdir: Path  # the ranks' working folder: copied in, and what they leave copied back
    rendezvous_dir: Path  # the process group's store
    channel_dir: Path  # the socket the ranks send their records to

    @property
    def store_path(self) -> Path:
        return self.rendezvous_dir / "store"


def privileged() -> bool:
    """Whether this process may mount and change users outside any user
    namespace (root, with its capabilities)."""
    for line in read_or_empty("/proc/self/status").splitlines():
        if line.startswith("CapEff:"):
            caps = int(line.split()[1], 16)
            return all(caps >> bit & 1 for bit in (CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN))
    return False


def why_unavailable() -> str | None:
    """None when this process can sandbox a run; else why not, for one line."""
    if not hasattr(os, "pidfd_open") or not os.path.exists("/proc/self/ns/net"):
        return "this system has no Linux namespaces"
    return None if privileged() else _why_no_user_namespace()


@functools.cache
def _why_no_user_namespace() -> str | None:
    """Try, in a child, what the holder and a rank do in a user namespace of their own."""
    child = os.fork()
    if child == 0:
        step = 1
        try:
            uid, gid = os.geteuid(), os.getegid()
            unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID)
            map_user(0, uid, gid)
            step = 2
            mount(None, "/", None, MS_REC | MS_PRIVATE)
            mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k")
            watch = _watch_writes()
            _mark(watch, "/tmp")
            os.close(watch)
            step = 3
            grandchild = os.fork()
            if grandchild == 0:
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                os._exit(0)
            os._exit(0 if os.waitstatus_to_exitcode(os.waitpid(grandchild, 0)[1]) == 0 else step)
        except BaseException:
            os._exit(step)
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    return {
        0: None,
        1: "the grader is not root, and this system does not let it make user namespaces",
        2: "the grader is not root, and this system's user namespaces cannot watch the files the ranks write",
        3: "the grader is not root, and this system's user namespaces cannot show the ranks a /proc of their own",
    }.get(code, "the grader is not root, and its test of user namespaces failed")


class Sandbox:
    """One run's namespaces, users and cgroups, from start to tear-down."""

    def __init__(self, layout: RunLayout, world_size: int, limits: Limits, hidden: list[Path], kept: list[Path]):
        self.layout, self.world_size, self.limits = layout, world_size, limits
        self._init_fd = self._release_write = self._answers = None
        self.user_namespace = not privileged()
        self.uid_base = UID_BASE + UID_BLOCK * (os.getpid() % UID_BLOCKS)
        tag = f"ddp-grade-{os.getpid()}-{id(self) & 0xFFFF:x}"
        memory = own_cgroup("memory")
        self.memory_cgroups = [
            make_cgroup(memory, f"{tag}-rank{r}", memory_settings(memory, limits.memory_bytes))
            for r in range(world_size)
        ]
        if not all(self.memory_cgroups):
            self.memory_cgroups = []
        self.pids_cgroup = make_cgroup(own_cgroup("pids"), tag, {"pids.max": str(limits.processes)})
        self._provided = _snapshot(layout.workdir)
        self._release_read, self._release_write = os.pipe()
        ready_read, ready_write = os.pipe()
        self.holder_pid = os.fork()
        if self.holder_pid == 0:
            os.close(ready_read)
            os.close(self._release_write)
            _hold(self, hidden, kept, ready_write)
        os.close(ready_write)
        os.close(self._release_read)
        self._answers = ready_read
        answer = _read_within(ready_read, START_TIMEOUT_S)
        if not answer.startswith("ready "):
            self.close()
            raise SandboxUnavailable(answer.removeprefix("error ") or "the sandbox did not start in time")
        self.init_pid, *self.mount_namespaces = map(int, answer.split()[1:])
        self._init_fd = os.pidfd_open(self.init_pid)

    @property
    def parent_fds(self) -> tuple[int, ...]:
        return self._release_write, self._init_fd

    def view(self) -> SandboxView:
        return SandboxView(
            self.init_pid,
            self.holder_pid,
            tuple(self.mount_namespaces),
            self.user_namespace,
            self.uid_base,
            tuple(self.memory_cgroups),
            self.pids_cgroup,
            {k: v for k, v in vars(self.limits).items()},
        )

    def end_processes(self) -> None:
        """Kill the PID namespace's init: the kernel kills all else in it."""
        try:
            os.kill(self.init_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        select.select([self._init_fd], [], [], END_TIMEOUT_S)

    def evidence(self) -> Evidence:
        """Read once every process of the run is gone (end_processes)."""
        workdir = self.layout.workdir
        seen = Path(f"/proc/{self.holder_pid}/root") / str(workdir).lstrip("/")
        # In a user namespace every rank is the grader's user outside: a file's owner names no rank.
        uid_base = None if self.user_namespace else self.uid_base
        owners = _copy_back(seen, workdir, self._provided, uid_base, self.world_size)
        packets = _loopback_packets(self.holder_pid)
        report = self._writers()
        writers = report.get("files", {})
        over = [r for r, cg in enumerate(self.memory_cgroups) if oom_kills(cg)]
        return Evidence(
            sandboxed=True,
            written_by={
                name: sorted(set(writers.get(name, [])) | ({owner} if owner is not None else set()))
                for name, owner in owners.items()
            },
            loopback_packets=packets,
            joined=report.get("joined"),
            over_memory=over,
            memory_by_cgroup=bool(self.memory_cgroups),
            process_limit_hit=bool(
                self.pids_cgroup and counter(read_or_empty(f"{self.pids_cgroup}/pids.events"), "max")
            ),
            limits=vars(self.limits).copy(),
        )

    def _writers(self) -> dict:
        """Ask the holder who wrote what: it watched every write in the run's folder.
        {"files": {name: ranks}, "joined": the ranks that wrote the rendezvous store}."""
        os.write(self._release_write, b"?")
        chunks = []
        while _read_within(self._answers, END_TIMEOUT_S, chunks):
            pass
        try:
            return json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            return {}

    def close(self) -> None:
        if self._answers is not None:
            os.close(self._answers)
            self._answers = None
        if getattr(self, "_init_fd", None) is not None:
            self.end_processes()
            os.close(self._init_fd)
            self._init_fd = None
        if self._release_write is not None:
            os.close(self._release_write)  # the holder's cue to exit
            self._release_write = None
            os.waitpid(self.holder_pid, 0)
        for folder in [*self.memory_cgroups, self.pids_cgroup]:
            remove_cgroup(folder)


def _loopback_packets(pid: int) -> int | None:
    for line in read_or_empty(f"/proc/{pid}/net/dev").splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[1])  # received packets; on loopback, all that was sent
    return None


def _read_within(fd: int, timeout_s: float, into: list | None = None) -> str:
    """What the holder wrote next ("" at its end, or after the timeout)."""
    readable, _, _ = select.select([fd], [], [], timeout_s)
    chunk = os.read(fd, 1 << 16) if readable else b""
    if into is not None:
        into.append(chunk)
    return chunk.decode(errors="replace")


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Relative name -> (size, mtime) of every file now in the folder."""
    found = {}
    for path in folder.rglob("*"):
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            found[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns)
    return found


def _copy_back(seen: Path, workdir: Path, provided: dict, uid_base: int | None, world_size: int) -> dict:
    """Copy what the ranks left in the sandbox's working folder to the grader's
    copy of it; return the rank that owns each new or changed file (None
    where no rank does, or where uid_base is None: owners name no rank)."""
    owners = {}
    for path in seen.rglob("*"):
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            continue
        name = str(path.relative_to(seen))
        if provided.get(name) == (info.st_size, info.st_mtime_ns):
            continue
        rank = info.st_uid - uid_base if uid_base is not None else -1
        owners[name] = rank if 0 <= rank < world_size else None
        target = workdir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        if stat.S_ISLNK(info.st_mode):
            target.symlink_to(os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            shutil.copy2(path, target, follow_symlinks=False)
    return owners


def _hold(sandbox: Sandbox, hidden: list[Path], kept: list[Path], ready_fd: int) -> None:
    """The forked holder. Never returns."""
    status = 1
    try:
        die_with_parent()
        os.setsid()
        _close_all_but(ready_fd, sandbox._release_read)  # the grader's pipes would never see their end
        uid, gid = os.geteuid(), os.getegid()
        user = CLONE_NEWUSER if sandbox.user_namespace else 0
        unshare(user | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
        if user:
            map_user(0, uid, gid)  # root of the run's namespaces, and the grader outside them
        socket.sethostname("localhost")  # gloo binds the address the host name resolves to
        loopback_up()
        _build_view(sandbox, hidden, kept)
        store = file_handle(str(sandbox.layout.store_path))  # now: the last rank to leave removes it
        writable = (sandbox.layout.workdir, sandbox.layout.rendezvous_dir)
        watches, namespaces = _rank_mounts(writable, sandbox.world_size)
        init_pid = os.fork()
        if init_pid == 0:
            _close_all_but()
            be_init()
        os.write(ready_fd, " ".join(map(str, ["ready", init_pid, *namespaces])).encode())
        writers = _gather_writes(watches, sandbox._release_read)
        report = json.dumps(_writers_report(writers, sandbox.layout.workdir, store)).encode()
        for start in range(0, len(report), 1 << 16):
            os.write(ready_fd, report[start : start + (1 << 16)])
        os.close(ready_fd)
        os.read(sandbox._release_read, 1)  # until the grader closes its end, or dies
        status = 0
    except BaseException as error:
        try:
            os.write(ready_fd, f"error {error}".encode())
        except OSError:
            pass
    os._exit(status)


FAN_CLASS_NOTIF, FAN_CLOEXEC, FAN_NONBLOCK, FAN_REPORT_FID = 0, 1, 2, 0x200
FAN_MARK_ADD, FAN_MARK_MOUNT, FAN_CLOSE_WRITE = 1, 0x10, 0x8
AT_FDCWD, MAX_HANDLE_SZ = -100, 128
_FAN_EVENT = struct.Struct("IBBHQii")  # fanotify_event_metadata: len, version, -, metadata len, mask, fd, pid
# After the metadata, fanotify_event_info_fid: type, -, len, fsid[2], then a file_handle:
# its size, type and bytes. The type and bytes are what name_to_handle_at gives for the file.
_FID_HANDLE_AT = 12
libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]


def _rank_mounts(writable: tuple[Path, ...], world_size: int) -> tuple[list[int], list[int]]:
    """Per rank, a mount namespace in which the writable folders are mounts
    of its own, and a fanotify group that hears of the writes made through
    them: a write's rank is the group that heard it. Returns the groups and
    the namespaces' descriptors, by rank."""
    shared = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    watches, namespaces = [], []
    for _ in range(world_size):
        unshare(CLONE_NEWNS)
        watch = _watch_writes()
        for folder in writable:
            mount(str(folder), str(folder), None, MS_BIND)
            _mark(watch, str(folder))
        watches.append(watch)
        namespaces.append(os.open("/proc/self/ns/mnt", os.O_RDONLY))
        checked(libc.setns(shared, CLONE_NEWNS), "setns")
    os.close(shared)
    return watches, namespaces


def _watch_writes() -> int:
    """A fanotify group for files closed after a write, naming each by its
    file handle. (A handle, not a descriptor, is what an unprivileged group
    may have.)"""
    fd = libc.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_FID, os.O_RDONLY)
    if fd < 0:
        checked(-1, "fanotify_init")
    return fd


def _mark(watch: int, folder: str) -> None:
    """Let the group hear of the writes on the mount at `folder`."""
    checked(
        libc.fanotify_mark(watch, FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_CLOSE_WRITE, AT_FDCWD, folder.encode()),
        "fanotify",
    )


def file_handle(path: str) -> bytes | None:
    """The kernel's handle of a file (its type and bytes), as fanotify names it; None if it has none."""
    handle = ctypes.create_string_buffer(struct.pack("Ii", MAX_HANDLE_SZ, 0), 8 + MAX_HANDLE_SZ)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, path.encode(), handle, ctypes.byref(mount_id), 0) != 0:
        return None
    return handle.raw[4 : 8 + struct.unpack_from("I", handle.raw)[0]]


def _gather_writes(watches: list[int], release_fd: int) -> dict[bytes, set[int]]:
    """File handle -> the ranks that wrote it, until the grader asks."""
    writers: dict[bytes, set[int]] = {}
    while True:
        readable, _, _ = select.select([*watches, release_fd], [], [])
        for rank, watch in enumerate(watches):
            _read_writes(watch, rank, writers)
        if release_fd in readable:
            return writers


def _read_writes(watch: int, rank: int, writers: dict) -> None:
    while True:
        try:
            buffer = os.read(watch, 1 << 16)
        except BlockingIOError:
            return
        offset = 0
        while offset < len(buffer):
            length, _, _, metadata_length, _, fd, _ = _FAN_EVENT.unpack_from(buffer, offset)
            info = buffer[offset + metadata_length : offset + length]
            offset += length
            if fd >= 0:
                os.close(fd)
            if len(info) < _FID_HANDLE_AT + 8:  # the queue overflowed: the owner of each file still tells
                continue
            size = struct.unpack_from("I", info, _FID_HANDLE_AT)[0]
            writers.setdefault(info[_FID_HANDLE_AT + 4 : _FID_HANDLE_AT + 8 + size], set()).add(rank)


def _writers_report(writers: dict, workdir: Path, store: bytes | None) -> dict:
    named = {}
    for path in workdir.rglob("*"):
        ranks = None if path.is_dir() and not path.is_symlink() else writers.get(file_handle(str(path)))
        if ranks:
            named[str(path.relative_to(workdir))] = sorted(ranks)
    return {"files": named, "joined": sorted(writers.get(store, []))}


def _close_all_but(*kept: int) -> None:
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2 and int(name) not in kept:
            try:
                os.close(int(name))
            except OSError:
                pass


def _build_view(sandbox: Sandbox, hidden: list[Path], kept: list[Path]) -> None:
    layout, tmpfs = sandbox.layout, f"size={sandbox.limits.tmp_bytes},mode=1777"
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the grader's view
    host_run = os.open(layout.run_dir, os.O_RDONLY | os.O_DIRECTORY)
    cover(hidden, kept, sandbox.limits.tmp_bytes)
    # The run's folder, on a tmpfs of its own: the code read-only, the socket the
    # records go to, and copies of the working folder and the rendezvous that every
    # rank's user may write. The grader's private files are not there. The tmpfs
    # itself is read-only: in a user namespace the ranks own what the holder made,
    # so only a read-only mount keeps them from renaming the working folder away.
    os.makedirs(layout.run_dir, exist_ok=True)
    mount("tmpfs", str(layout.run_dir), "tmpfs", MS_NOSUID | MS_NODEV, tmpfs.replace("1777", "0755"))
    here = lambda folder: f"/proc/self/fd/{host_run}/{folder.relative_to(layout.run_dir)}"  # noqa: E731
    for folder in (layout.code_dir, layout.channel_dir):
        os.makedirs(folder)
        mount(here(folder), str(folder), None, MS_BIND)
        mount(None, str(folder), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for folder in (layout.workdir, layout.rendezvous_dir):
        shutil.copytree(here(folder), folder, symlinks=True)
        for inner, _, _ in os.walk(folder):
            os.chmod(inner, 0o777)
        mount(str(folder), str(folder), None, MS_BIND)
    os.close(host_run)
    make_rest_read_only(writable=(layout.workdir, layout.rendezvous_dir))

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
import faulthandler
import fcntl
import functools
import json
import os
import select
import shutil
import signal
import socket
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .._process import die_with_parent

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

# Each run takes UID_BLOCK uids from UID_BASE up, the block chosen by the grader's pid.
UID_BASE, UID_BLOCK, UID_BLOCKS = 200_000, 32, 100_000
NESTED_UID = 1000  # a rank's uid inside its own user namespace, when the grader is not root
CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN = 6, 7, 21
# Special file systems keep their own rules; every other mount is made read-only, the
# host's tmpfs too (/run and the like), but for the private ones that `cover` makes.
LEFT_WRITABLE_TYPES = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue"}
PRIVATE_TMP = (Path("/tmp"), Path("/dev/shm"))
START_TIMEOUT_S = 10.0
END_TIMEOUT_S = 10.0
STUDENT_NAME = "student"  # $USER in the ranks: their uid has no passwd entry
HOME = "/tmp/home"

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxUnavailable(Exception):
    """This machine or user cannot make the run's sandbox; the reason is the message."""


@dataclass(frozen=True)
class Limits:
    """What one rank may use. Exceeding one ends in a verdict that names it."""

    memory_bytes: int = 4 * 2**30
    processes: int = 256  # the whole run's processes and threads
    file_bytes: int = 1 * 2**30  # the largest file a rank may write
    tmp_bytes: int = 2 * 2**30  # /tmp (with the working folder) and /dev/shm, each
    open_files: int = 4096
    cpu_seconds: int = 3600


DEFAULT_LIMITS = Limits()


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


@dataclass(frozen=True)
class SandboxView:
    """What a rank needs to join the run's sandbox: JSON-able, in its RankSpec."""

    init_pid: int
    holder_pid: int
    mount_namespaces: tuple[int, ...]  # per rank, the holder's descriptor of that rank's mount namespace
    user_namespace: bool  # the run has a user namespace of its own: the grader is not root
    uid_base: int
    memory_cgroups: tuple[str, ...]  # per rank, its cgroup folder; () where there is none
    pids_cgroup: str  # "" where there is none
    limits: dict


@dataclass
class Evidence:
    """What the grader saw of the run from outside the ranks."""

    sandboxed: bool = False
    # New or changed file -> the ranks that wrote it, seen by the kernel (fanotify), however it was written.
    written_by: dict = field(default_factory=dict)
    loopback_packets: int | None = None  # packets the run's ranks sent each other
    joined: list | None = None  # the ranks that wrote to the rendezvous store: who really joined
    over_memory: list = field(default_factory=list)  # ranks the kernel killed at the memory limit
    memory_by_cgroup: bool = False  # else an rlimit bounds each rank's heap: an allocation past it fails
    process_limit_hit: bool = False
    limits: dict = field(default_factory=dict)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def privileged() -> bool:
    """Whether this process may mount and change users outside any user
    namespace (root, with its capabilities)."""
    for line in _read("/proc/self/status").splitlines():
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


def map_user(inner: int, uid: int, gid: int) -> None:
    """In a new user namespace: `inner` is this process's only user and group, uid and gid outside."""
    Path("/proc/self/setgroups").write_text("deny")  # the kernel's condition for an unprivileged gid map
    Path("/proc/self/uid_map").write_text(f"{inner} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{inner} {gid} 1")


# --- the grader's side ------------------------------------------------------------


def _own_cgroup(controller: str) -> Path | None:
    """Where this process may make cgroups of a controller: its v1 folder, or
    the v2 hierarchy's where the controller is enabled there; None if neither."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        folder = (
            Path(f"/sys/fs/cgroup/{controller}") / path.lstrip("/")
            if names
            else Path("/sys/fs/cgroup") / path.lstrip("/")
        )
        if controller in names.split(",") or (
            not names and controller in _read(f"{folder}/cgroup.subtree_control").split()
        ):
            return folder if os.access(folder, os.W_OK) else None
    return None


def _make_cgroup(parent: Path | None, name: str, settings: dict[str, str]) -> str:
    if parent is None:
        return ""
    folder = parent / name
    try:
        folder.mkdir()
        for key, value in settings.items():
            (folder / key).write_text(value)
    except OSError:
        _remove_cgroup(str(folder))
        return ""
    return str(folder)


def _remove_cgroup(folder: str) -> None:
    if folder:
        try:
            os.rmdir(folder)
        except OSError:
            pass


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _counter(text: str, name: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


class Sandbox:
    """One run's namespaces, users and cgroups, from start to tear-down."""

    def __init__(self, layout: RunLayout, world_size: int, limits: Limits, hidden: list[Path], kept: list[Path]):
        self.layout, self.world_size, self.limits = layout, world_size, limits
        self._init_fd = self._release_write = self._answers = None
        self.user_namespace = not privileged()
        self.uid_base = UID_BASE + UID_BLOCK * (os.getpid() % UID_BLOCKS)
        tag = f"ddp-grade-{os.getpid()}-{id(self) & 0xFFFF:x}"
        memory = _own_cgroup("memory")
        self.memory_cgroups = [
            _make_cgroup(memory, f"{tag}-rank{r}", _memory_settings(memory, limits.memory_bytes))
            for r in range(world_size)
        ]
        if not all(self.memory_cgroups):
            self.memory_cgroups = []
        self.pids_cgroup = _make_cgroup(_own_cgroup("pids"), tag, {"pids.max": str(limits.processes)})
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
        over = [r for r, cg in enumerate(self.memory_cgroups) if _oom_kills(cg)]
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
            process_limit_hit=bool(self.pids_cgroup and _counter(_read(f"{self.pids_cgroup}/pids.events"), "max")),
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
            _remove_cgroup(folder)


def _memory_settings(parent: Path | None, limit: int) -> dict[str, str]:
    if parent is not None and (parent / "memory.limit_in_bytes").exists():
        return {"memory.limit_in_bytes": str(limit)}
    return {"memory.max": str(limit), "memory.swap.max": "0"}


def _oom_kills(folder: str) -> int:
    if not folder:
        return 0
    events = _read(f"{folder}/memory.events") or _read(f"{folder}/memory.oom_control")
    return _counter(events, "oom_kill")


def _loopback_packets(pid: int) -> int | None:
    for line in _read(f"/proc/{pid}/net/dev").splitlines():
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


# --- the holder: makes the namespaces and the view, then waits ------------------------


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
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]


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
        _check(_libc.setns(shared, CLONE_NEWNS), "setns")
    os.close(shared)
    return watches, namespaces


def _watch_writes() -> int:
    """A fanotify group for files closed after a write, naming each by its
    file handle. (A handle, not a descriptor, is what an unprivileged group
    may have.)"""
    fd = _libc.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_FID, os.O_RDONLY)
    if fd < 0:
        _check(-1, "fanotify_init")
    return fd


def _mark(watch: int, folder: str) -> None:
    """Let the group hear of the writes on the mount at `folder`."""
    _check(
        _libc.fanotify_mark(watch, FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_CLOSE_WRITE, AT_FDCWD, folder.encode()),
        "fanotify",
    )


def file_handle(path: str) -> bytes | None:
    """The kernel's handle of a file (its type and bytes), as fanotify names it; None if it has none."""
    handle = ctypes.create_string_buffer(struct.pack("Ii", MAX_HANDLE_SZ, 0), 8 + MAX_HANDLE_SZ)
    mount_id = ctypes.c_int()
    if _libc.name_to_handle_at(AT_FDCWD, path.encode(), handle, ctypes.byref(mount_id), 0) != 0:
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


def be_init() -> None:
    """PID 1 of the run: reap the orphans until killed."""
    die_with_parent()
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()
        except InterruptedError:
            pass


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


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


def cover(hidden: list[Path], kept: list[Path], tmp_bytes: int) -> None:
    """In a new mount namespace: hide the hidden folders and files, give a
    fresh /tmp, /dev/shm and $HOME, and mount back the kept folders that those
    covered (Python, the venv, the grader's package: wherever they are, /tmp
    included)."""
    tmpfs = f"size={tmp_bytes},mode=1777"
    kept_fds = [(path, os.open(path, os.O_PATH)) for path in kept if path.exists()]
    kinds = [(path, path.is_dir(), path.exists()) for path in hidden]
    # The fresh /tmp first: a hidden folder under it (a course cloned into /tmp) is still covered.
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmpfs)
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmpfs)
    for path, is_dir, exists in kinds:
        if is_dir:
            os.makedirs(path, exist_ok=True)
            mount("tmpfs", str(path), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        elif exists:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
            mount("/dev/null", str(path), None, MS_BIND)
    covered = [*hidden, Path("/tmp"), Path("/dev/shm")]
    for path, fd in kept_fds:
        if any(path.is_relative_to(c) for c in covered):
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
        os.close(fd)
    os.makedirs(HOME, mode=0o777, exist_ok=True)
    os.chmod(HOME, 0o777)


def make_rest_read_only(writable: tuple[Path, ...] = ()) -> None:
    """Every mount read-only but the special file systems, the private /tmp
    and /dev/shm, and the mounts at `writable`."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mount_point = Path(fields[4].replace("\\040", " "))
        fstype = fields[fields.index("-") + 1]
        if fstype in LEFT_WRITABLE_TYPES or "ro" in fields[5].split(",") or mount_point in (*writable, *PRIVATE_TMP):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        flags |= sum(bit for name, bit in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV)) if name in fields[5])
        try:
            mount(None, str(mount_point), None, flags)
        except OSError:
            pass  # a mount under a hidden folder: not visible anyway


# --- the rank's side ----------------------------------------------------------------


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
        _join(joined.pop("user"))
    _join(joined.pop("pid"))
    _fork_behind_a_relay()
    for name in ("mnt", "net", "ipc", "uts"):
        _join(joined.pop(name))
    # A /proc of the run's PID namespace: the grader and the other runs' processes are not in it.
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _take_limits(Limits(**view.limits), memory_counted=bool(view.memory_cgroups))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, not a kill
    os.umask(0)  # the ranks are different users, yet may share files as ranks of one user could
    if view.user_namespace:
        unshare(CLONE_NEWUSER)  # a namespace of the rank's own, where it holds nothing over the run's
        map_user(NESTED_UID, 0, 0)
        become(NESTED_UID, keep_groups=True)  # the groups are fixed, by map_user
    else:
        become(view.uid_base + rank)
    os.environ.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    os.chdir(workdir)


def _join(fd: int) -> None:
    try:
        _check(_libc.setns(fd, 0), "setns")
    finally:
        os.close(fd)


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


def become(uid: int, keep_groups: bool = False) -> None:
    """Give up privilege for good: the user uid, no groups, no way back (no_new_privs)."""
    if not keep_groups:
        os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    die_with_parent()  # a change of user clears it
    os.environ.update(HOME=HOME, TMPDIR="/tmp", USER=STUDENT_NAME, LOGNAME=STUDENT_NAME)

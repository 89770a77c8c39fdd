"""The sandbox of one run (Linux, as root): what the ranks can see and do.

The grader forks a holder for the run. It makes new mount, network, IPC,
UTS and PID namespaces and forks the PID namespace's init. Each rank, as
the first thing it does after its fork, joins those namespaces, moves into
its cgroups, takes its limits and becomes an unprivileged user of its own
(a uid per rank, so the owner of a file says which rank wrote it, however it
was written). So:

* the ranks share one network with loopback only (gloo and NCCL work, the
  world does not);
* the root file system is read-only, /tmp and /dev/shm are private size-capped
  tmpfs, the run's working folder is a copy on that tmpfs, and the course
  (solutions, hidden tests, gradebook, other students) is not there at all;
* whatever a rank starts lives in the PID namespace, and dies with its init;
* a rank cannot signal, trace or read the grader: it is another user.

Fork first, then join: the ranks still fork from a warm process.

After the ranks are gone the grader reads the evidence (`Evidence`): the
files left, with the rank that owns each, the loopback's traffic, and which
limits were hit. Then it tears the run down.
"""

from __future__ import annotations

import ctypes
import faulthandler
import fcntl
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
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

# Each run takes UID_BLOCK uids from UID_BASE up, the block chosen by the grader's pid.
UID_BASE, UID_BLOCK, UID_BLOCKS = 200_000, 32, 100_000
# Special file systems keep their own rules; every other mount is made read-only.
LEFT_WRITABLE_TYPES = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue", "tmpfs"}
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


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        _check(_libc.setns(fd, 0), f"setns {path}")
    finally:
        os.close(fd)


def why_unavailable() -> str | None:
    """None when this process can sandbox a run; else why not, for one line."""
    if not hasattr(os, "pidfd_open") or not os.path.exists("/proc/self/ns/net"):
        return "this system has no Linux namespaces"
    if os.geteuid() != 0:
        return "the grader does not run as root, so it cannot give the ranks users of their own"
    return None


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
        self.init_pid = int(answer.split()[1])
        self._init_fd = os.pidfd_open(self.init_pid)

    @property
    def parent_fds(self) -> tuple[int, ...]:
        return self._release_write, self._init_fd

    def view(self) -> SandboxView:
        return SandboxView(
            self.init_pid,
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
        owners = _copy_back(seen, workdir, self._provided, self.uid_base, self.world_size)
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


def _copy_back(seen: Path, workdir: Path, provided: dict, uid_base: int, world_size: int) -> dict:
    """Copy what the ranks left in the sandbox's working folder to the grader's
    copy of it; return who owns each new or changed file."""
    owners = {}
    for path in seen.rglob("*"):
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            continue
        name = str(path.relative_to(seen))
        if provided.get(name) == (info.st_size, info.st_mtime_ns):
            continue
        rank = info.st_uid - uid_base
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
        unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
        socket.sethostname("localhost")  # gloo binds the address the host name resolves to
        loopback_up()
        _build_view(sandbox, hidden, kept)
        watch = _watch_writes(str(sandbox.layout.run_dir))
        store = sandbox.layout.store_path.stat()  # now: the last rank to leave removes it
        init_pid = os.fork()
        if init_pid == 0:
            be_init()
        os.write(ready_fd, f"ready {init_pid}".encode())
        writers = _gather_writes(watch, sandbox._release_read, sandbox.uid_base, sandbox.world_size)
        report = json.dumps(_writers_report(writers, sandbox.layout.workdir, (store.st_dev, store.st_ino))).encode()
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


FAN_CLASS_NOTIF, FAN_CLOEXEC, FAN_NONBLOCK, FAN_MARK_ADD, FAN_MARK_MOUNT, FAN_CLOSE_WRITE = 0, 1, 2, 1, 0x10, 0x8
AT_FDCWD = -100
_FAN_EVENT = struct.Struct("IBBHQii")  # fanotify_event_metadata: len, version, -, metadata len, mask, fd, pid
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]


def _watch_writes(folder: str) -> int:
    """A fanotify descriptor that hears of every file closed after a write on
    the mount of the run's folder, with the writer's pid."""
    fd = _libc.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK, os.O_RDONLY | os.O_LARGEFILE)
    if fd < 0:
        _check(-1, "fanotify_init")
    _check(
        _libc.fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_CLOSE_WRITE, AT_FDCWD, folder.encode()), "fanotify"
    )
    return fd


def _gather_writes(watch: int, release_fd: int, uid_base: int, world_size: int) -> dict[tuple[int, int], set[int]]:
    """(device, inode) -> the ranks that wrote it, until the grader asks."""
    writers: dict[tuple[int, int], set[int]] = {}
    while True:
        readable, _, _ = select.select([watch, release_fd], [], [])
        _read_writes(watch, writers, uid_base, world_size)
        if release_fd in readable:
            return writers


def _read_writes(watch: int, writers: dict, uid_base: int, world_size: int) -> None:
    while True:
        try:
            buffer = os.read(watch, 1 << 16)
        except BlockingIOError:
            return
        offset = 0
        while offset < len(buffer):
            length, _, _, _, _, fd, pid = _FAN_EVENT.unpack_from(buffer, offset)
            offset += length
            if fd < 0:  # the queue overflowed: the owner of each file still tells
                continue
            info = os.fstat(fd)
            os.close(fd)
            try:
                uid = os.stat(f"/proc/{pid}").st_uid  # the writer's user, so its rank
            except OSError:
                uid = info.st_uid
            if 0 <= uid - uid_base < world_size:
                writers.setdefault((info.st_dev, info.st_ino), set()).add(uid - uid_base)


def _writers_report(writers: dict, workdir: Path, store: tuple[int, int]) -> dict:
    named = {}
    for path in workdir.rglob("*"):
        info = path.lstat()
        ranks = writers.get((info.st_dev, info.st_ino))
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
    # rank's user may write. The grader's private files are not there.
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
    os.close(host_run)
    make_rest_read_only()


def cover(hidden: list[Path], kept: list[Path], tmp_bytes: int) -> None:
    """In a new mount namespace: hide the hidden folders and files, give a
    fresh /tmp, /dev/shm and $HOME, and mount back the kept folders that those
    covered (Python, the venv, the grader's package: wherever they are, /tmp
    included)."""
    tmpfs = f"size={tmp_bytes},mode=1777"
    kept_fds = [(path, os.open(path, os.O_PATH)) for path in kept if path.exists()]
    for path in hidden:
        if path.is_dir():
            mount("tmpfs", str(path), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        elif path.exists():
            mount("/dev/null", str(path), None, MS_BIND)
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmpfs)
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmpfs)
    covered = [*hidden, Path("/tmp"), Path("/dev/shm")]
    for path, fd in kept_fds:
        if any(path.is_relative_to(c) for c in covered):
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
        os.close(fd)
    os.makedirs(HOME, mode=0o777, exist_ok=True)
    os.chmod(HOME, 0o777)


def make_rest_read_only(writable: tuple[Path, ...] = ()) -> None:
    """Every mount read-only but the special file systems, the tmpfs, and `writable`."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        mount_point = fields[4].replace("\\040", " ")
        fstype = fields[fields.index("-") + 1]
        if fstype in LEFT_WRITABLE_TYPES or "ro" in fields[5].split(",") or Path(mount_point) in writable:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        flags |= sum(bit for name, bit in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV)) if name in fields[5])
        try:
            mount(None, mount_point, None, flags)
        except OSError:
            pass  # a mount under a hidden folder: not visible anyway


# --- the rank's side ----------------------------------------------------------------


RELAYED_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)  # the stack-dump request among them


def _relay(child: int) -> None:
    """The launcher's process, outside the PID namespace: wait for the rank
    inside it and end the same way. Never returns."""
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
    """Join the run's sandbox as user uid_base + rank. Called as root, before
    any student code runs. Raises OSError.

    A process that joins a PID namespace cannot start threads (the kernel
    refuses), and one with threads cannot join a mount namespace. So the
    process the launcher started joins the PID namespace only and stays
    outside as a relay: it forks the rank proper, which is born inside,
    single-threaded, and joins the rest. The relay passes on the launcher's
    signals and ends as the rank ends."""
    pid = str(os.getpid())
    if view.memory_cgroups:
        Path(view.memory_cgroups[rank], "cgroup.procs").write_text(pid)
    if view.pids_cgroup:
        Path(view.pids_cgroup, "cgroup.procs").write_text(pid)
    init = f"/proc/{view.init_pid}/ns"
    _setns(f"{init}/pid")
    child = os.fork()
    if child != 0:
        _relay(child)
    for name in ("mnt", "net", "ipc", "uts"):
        _setns(f"{init}/{name}")
    limits = Limits(**view.limits)
    import resource

    for which, soft, hard in (
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_NPROC, limits.processes, limits.processes),
        # SIGXCPU at the soft limit names the cause; SIGKILL at the hard one, should it be ignored.
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(which, (soft, hard))
    if not view.memory_cgroups:  # no cgroup to count memory: bound the heap at least
        resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_bytes, limits.memory_bytes))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, not a kill
    os.umask(0)  # the ranks are different users, yet may share files as ranks of one user could
    become(view.uid_base + rank)
    os.environ.update(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    os.chdir(workdir)


def become(uid: int) -> None:
    """Give up root for good: the user uid, no groups, no way back (no_new_privs)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    die_with_parent()  # a change of user clears it
    os.environ.update(HOME=HOME, TMPDIR="/tmp", USER=STUDENT_NAME, LOGNAME=STUDENT_NAME)

"""The Linux primitives the sandboxes are built of, for the grader's side, the
ranks' and the autograding kernel's: namespaces and mounts, user maps, a
loopback-only network, covering the course, and giving up privilege for
good. Calls into libc through ctypes; nothing here knows about a run.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
from pathlib import Path

from ._process import die_with_parent

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN = 6, 7, 21
# Special file systems keep their own rules; every other mount is made read-only, the
# host's tmpfs too (/run and the like), but for the private ones that `cover` makes.
LEFT_WRITABLE_TYPES = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue"}
PRIVATE_TMP = (Path("/tmp"), Path("/dev/shm"))
STUDENT_NAME = "student"  # $USER in the ranks: their uid has no passwd entry
HOME = "/tmp/home"
NESTED_UID = 1000  # the uid of a rank or kernel in its own user namespace, when the grader is not root

libc = ctypes.CDLL(None, use_errno=True)


def checked(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    checked(libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def unshare(flags: int) -> None:
    checked(libc.unshare(flags), "unshare")


def map_user(inner: int, uid: int, gid: int) -> None:
    """In a new user namespace: `inner` is this process's only user and group, uid and gid outside."""
    Path("/proc/self/setgroups").write_text("deny")  # the kernel's condition for an unprivileged gid map
    Path("/proc/self/uid_map").write_text(f"{inner} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{inner} {gid} 1")


def read_or_empty(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


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


def join_namespace(fd: int) -> None:
    try:
        checked(libc.setns(fd, 0), "setns")
    finally:
        os.close(fd)


def become_nested() -> None:
    """Give up privilege for good, where the caller's own user is all it has
    (a grader that is not root): a user namespace of its own, in which this
    process is NESTED_UID and holds nothing over the namespaces it is in."""
    unshare(CLONE_NEWUSER)
    map_user(NESTED_UID, 0, 0)
    become(NESTED_UID, keep_groups=True)  # the groups are fixed, by map_user


def become(uid: int, keep_groups: bool = False) -> None:
    """Give up privilege for good: the user uid, no groups, no way back (no_new_privs)."""
    if not keep_groups:
        os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    die_with_parent()  # a change of user clears it
    os.environ.update(HOME=HOME, TMPDIR="/tmp", USER=STUDENT_NAME, LOGNAME=STUDENT_NAME)

"""nbgrader's exchange, safe for a class whose students share one machine (a hub).

nbgrader's own exchange already hides each submission behind a random name in
an inbound folder nobody but the instructor may list, and each student's
feedback behind a hash of a secret only that submission holds. Two gaps stay,
both closed here:

* **A submission in someone else's name.** `nbgrader submit --student bob`,
  run by alice, leaves a submission named for bob; nbgrader's collect takes it
  as bob's (it only warns that the owner differs), and alice, who knows its
  secret, can then read bob's feedback. `OwnedSubmissionsCollect` counts a
  submission only when the Unix user it names made every file in it.
* **A link to the instructor's files.** A student may add a symbolic link
  (say to the course's `source/` or to another student's work) to their own
  submission after submitting; nbgrader's collect copies as the instructor and
  follows it. Here the copy opens every file without following links, and a
  submission holding anything but the student's own folders and files is
  refused whole.

* **A submission open to all.** nbgrader's submit leaves each submission
  folder writable by every user; whoever learns its name may empty it.
  `PrivateSubmit` leaves it to its student and the instructor's group.

`prepare_exchange` lays the course's part of the exchange out before any
student logs in, so that no student can take its folders first.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import ignore_patterns

INBOUND_MODE = 0o3733  # others may add (wx) but not list (r), nor remove what is not theirs (sticky)
SUBMISSION_MODE = 0o2750  # the student's, and the instructor's group's (inbound's, set-group-id) to read
COURSE_MODE, OUTBOUND_MODE, FEEDBACK_MODE = 0o755, 0o755, 0o711


class UnsafeSubmission(Exception):
    """A submission that is not all its student's own folders and files; the message says why."""


def prepare_exchange(root: Path, course_id: str, instructor: str) -> Path:
    """The exchange's root (anyone may add a course, nobody may take another's) and the
    course's folders, the instructor's, with the modes nbgrader gives them, inbound sticky."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o1777)
    account = pwd.getpwnam(instructor)
    course = root / course_id
    for folder, mode in (
        (course, COURSE_MODE),
        (course / "inbound", INBOUND_MODE),
        (course / "outbound", OUTBOUND_MODE),
        (course / "feedback", FEEDBACK_MODE),
    ):
        folder.mkdir(exist_ok=True)
        os.chown(folder, account.pw_uid, account.pw_gid)
        folder.chmod(mode)
    return course


def _uid_of(student: str) -> int | None:
    try:
        return pwd.getpwnam(student).pw_uid
    except KeyError:
        return None


def why_unsafe(submission: Path, student: str) -> str | None:
    """None when the submission is folders and regular files only, all made by the Unix user
    `student`; else why it cannot count as theirs. (A first look: copy_owned checks again as
    it copies, for a student who changes it meanwhile.)"""
    uid = _uid_of(student)
    if uid is None:
        return f"there is no user named {student!r} on this machine"
    for path in [submission, *submission.rglob("*")]:
        info = path.lstat()
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            return f"{path.relative_to(submission.parent)} is not a plain file or folder"
        if info.st_uid != uid:
            return f"{path.relative_to(submission.parent)} was made by another user, not {student}"
    return None


def copy_owned(source: Path, target: Path, uid: int, ignore=None) -> None:
    """Copy a tree of folders and regular files all owned by `uid`, never following a link,
    even one swapped in during the copy. Raises UnsafeSubmission; leaves no partial copy."""
    try:
        for folder, folders, files, folder_fd in os.fwalk(source):  # it opens each folder without following links
            if os.fstat(folder_fd).st_uid != uid:
                raise UnsafeSubmission(f"{folder} was made by another user")
            relative = Path(folder).relative_to(source)
            (target / relative).mkdir(parents=True, exist_ok=True)
            skipped = set(ignore(folder, folders + files)) if ignore else set()
            folders[:] = [name for name in folders if name not in skipped]
            for name in files:
                if name not in skipped:
                    _copy_file(folder_fd, name, target / relative / name, uid)
    except UnsafeSubmission:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _copy_file(folder_fd: int, name: str, target: Path, uid: int) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
    except OSError as error:  # ELOOP: a link
        raise UnsafeSubmission(f"{name} cannot be opened as a plain file ({error.strerror})") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeSubmission(f"{name} is not a plain file")
        if info.st_uid != uid:
            raise UnsafeSubmission(f"{name} was made by another user")
        with open(target, "wb") as copy:
            shutil.copyfileobj(file, copy)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


class OwnedSubmissionsCollect(ExchangeCollect):
    """nbgrader's collect, counting a submission only when the student it names made all of it
    (c.ExchangeFactory.collect in nbgrader_config.py)."""

    def init_src(self):
        self._refusals = {}
        super().init_src()  # it takes each student's latest submission, as _sort_by_timestamp puts them
        self.src_records = [record for record in self.src_records if self._why_refused(record) is None]

    def _sort_by_timestamp(self, records):
        # A student's own submissions first, latest first: one forged in their name never hides them.
        return sorted(
            records, key=lambda record: (self._why_refused(record) is None, record["timestamp"]), reverse=True
        )

    def _why_refused(self, record) -> str | None:
        """Why a submission cannot count (None if it can); said once in the log, as an error."""
        name = record["filename"]
        if name not in self._refusals:
            reason = why_unsafe(Path(self.inbound_path, name), record["username"])
            if reason is not None:
                self._say_refused(name, record["username"], reason)
            self._refusals[name] = reason
        return self._refusals[name]

    def _say_refused(self, name: str, student: str, reason) -> None:
        self.log.error("Not collected: %s, in %s's name: %s.", name, student, reason)

    def do_copy(self, src, dest, log=None):
        name = os.path.basename(src)
        student = name.rsplit("+", 3)[0]
        if self.get_size(src) > 1000 * self.coursedir.max_dir_size:  # nbgrader's own cap
            self._say_refused(name, student, "it is larger than CourseDirectory.max_dir_size")
            return
        ignore = ignore_patterns(
            exclude=self.coursedir.ignore,
            include=self.coursedir.include,
            max_file_size=self.coursedir.max_file_size,
            log=self.log,
        )
        try:
            copy_owned(Path(src), Path(dest), _uid_of(student), ignore)
        except UnsafeSubmission as error:
            self._say_refused(name, student, error)


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit, whose submission only its student may change and only they and the
    instructor's group may read (c.ExchangeFactory.submit in hub/common/nbgrader_config.py)."""

    def copy_files(self):
        super().copy_files()
        os.chmod(os.path.join(self.inbound_path, self.assignment_filename), SUBMISSION_MODE)

"""nbgrader's exchange for a class on one machine, attacked as a second student would:
real Unix users, real `nbgrader release_assignment / fetch_assignment / submit / collect`,
the hub's settings (hub/). Each attack gains nothing."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder._files import chown_tree
from autograder.nbgrader_ext.exchange import prepare_exchange
from hub.__main__ import COURSE_ID, closed_folder
from hub.users import Account, ensure_account, remove_account, run_as
from tools.demo import copy_course

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes Unix users: needs root")

ASSIGNMENT = "linear_regression"
NBGRADER = [sys.executable, "-m", "nbgrader"]
PYTHON = [sys.executable, "-c"]


class Folders:
    """Lets every user through the folders on the way to the venv's Python for a while (this machine's
    Python may live under /root), as the hub's README asks of an instructor's machine."""

    def __init__(self):
        self.opened = []

    def open_way_to(self, path: Path) -> None:
        while (folder := closed_folder(path)) is not None:
            self.opened.append((folder, folder.stat().st_mode))
            folder.chmod(folder.stat().st_mode | stat.S_IXOTH)

    def restore(self) -> None:
        for folder, mode in reversed(self.opened):
            folder.chmod(stat.S_IMODE(mode))


@pytest.fixture(scope="module")
def machine_for_a_class():
    folders = Folders()
    folders.open_way_to(Path(sys.executable))
    yield
    folders.restore()


class Class:
    def __init__(self, base: Path, teacher: Account, students: dict[str, Account]):
        self.base, self.teacher, self.students = base, teacher, students
        self.course = base / "course"
        self.exchange = base / "exchange"
        self.settings = {
            "instructor": teacher.name,
            "exchange": str(self.exchange),
            "course_dir": str(self.course),
            "venv_bin": str(Path(sys.executable).parent),
        }

    def as_teacher(self, *args: str):
        return run_as(self.teacher, self.settings, [*NBGRADER, *args], self.course)

    def as_student(self, name: str, *args: str, command=NBGRADER):
        student = self.students[name]
        return run_as(student, self.settings, [*command, *args], student.home)

    def tries(self, name: str, code: str) -> str:
        """What a student's Python prints trying `code` (it prints DENIED when refused)."""
        body = "".join(f"    {line}\n" for line in code.splitlines())
        wrapped = f"try:\n{body}except OSError:\n    print('DENIED')"
        return self.as_student(name, wrapped, command=PYTHON).stdout.strip()

    @property
    def inbound(self) -> Path:
        return self.exchange / COURSE_ID / "inbound"

    def inbound_of(self, name: str) -> list[Path]:
        return sorted(self.inbound.glob(f"{name}+{ASSIGNMENT}+*"))


def write_answer(account: Account, mark: str) -> None:
    """The student's fetched notebook, with a cell of theirs that says who wrote it."""
    path = account.home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_markdown_cell(mark))
    nbformat.write(notebook, path)
    os.chown(path, account.uid, account.gid)


@pytest.fixture(scope="module")
def a_class(machine_for_a_class):
    base = Path(tempfile.mkdtemp(prefix="ddp-exchange-"))
    base.chmod(0o755)
    names = ["ddpx-teach", "ddpx-alice", "ddpx-bob", "ddpx-carol"]
    teacher, *students = [ensure_account(name) for name in names]
    try:
        the_class = Class(base, teacher, {s.name.removeprefix("ddpx-"): s for s in students})
        copy_course(the_class.course)
        chown_tree(the_class.course, teacher.uid, teacher.gid)
        the_class.as_teacher("generate_assignment", ASSIGNMENT)
        prepare_exchange(the_class.exchange, COURSE_ID, teacher.name)
        the_class.as_teacher("release_assignment", ASSIGNMENT)
        for name, student in the_class.students.items():
            the_class.as_student(name, "fetch_assignment", ASSIGNMENT)
            write_answer(student, f"written by {name}")
        the_class.as_student("bob", "submit", ASSIGNMENT)
        yield the_class
    finally:
        for name in names:
            remove_account(name)
        shutil.rmtree(base, ignore_errors=True)


def test_a_student_can_neither_read_list_nor_remove_another_s_submission(a_class):
    [bobs] = a_class.inbound_of("ddpx-bob")
    files = sorted(bobs.rglob("*"))
    assert a_class.tries("alice", f"print(len(__import__('os').listdir({str(a_class.inbound)!r})))") == "DENIED"
    assert a_class.tries("alice", f"__import__('shutil').rmtree({str(bobs)!r})") == "DENIED"
    assert a_class.tries("alice", f"__import__('os').rename({str(bobs)!r}, {str(bobs) + 'x'!r})") == "DENIED"
    assert a_class.tries("alice", f"print(__import__('os').listdir({str(bobs)!r}))") == "DENIED"
    assert a_class.tries("alice", f"print(open({str(bobs / f'{ASSIGNMENT}.ipynb')!r}).read())") == "DENIED"
    assert sorted(bobs.rglob("*")) == files and files


def test_a_student_cannot_change_the_release_nor_list_the_feedback(a_class):
    released = a_class.exchange / COURSE_ID / "outbound" / ASSIGNMENT
    notebook = released / f"{ASSIGNMENT}.ipynb"
    before = notebook.read_bytes()
    assert a_class.tries("alice", f"open({str(notebook)!r}, 'a').write('x')") == "DENIED"
    assert a_class.tries("alice", f"open({str(released / 'extra.py')!r}, 'w').write('x')") == "DENIED"
    feedback = a_class.exchange / COURSE_ID / "feedback"
    assert a_class.tries("alice", f"print(__import__('os').listdir({str(feedback)!r}))") == "DENIED"
    assert notebook.read_bytes() == before


def test_a_submission_in_another_s_name_or_linking_the_course_is_not_collected(a_class):
    # alice hands in her notebook as bob's, later than his; then her own.
    a_class.as_student("alice", "submit", ASSIGNMENT, "--student", "ddpx-bob")
    a_class.as_student("alice", "submit", ASSIGNMENT)
    # carol submits, then links the instructor's solution into her submission, for the collect to copy.
    a_class.as_student("carol", "submit", ASSIGNMENT)
    [carols] = a_class.inbound_of("ddpx-carol")
    solution = a_class.course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    a_class.as_student(
        "carol", f"import os; os.symlink({str(solution)!r}, {str(carols / 'answers.ipynb')!r})", command=PYTHON
    )

    collected = a_class.as_teacher("collect", ASSIGNMENT)
    log = " ".join((collected.stdout + collected.stderr).split())
    submitted = a_class.course / "submitted"
    read = lambda name: (submitted / name / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()  # noqa: E731
    assert "written by bob" in read("ddpx-bob") and "written by alice" not in read("ddpx-bob")
    assert "written by alice" in read("ddpx-alice")
    assert not (submitted / "ddpx-carol").exists() or not any((submitted / "ddpx-carol").rglob("*.ipynb"))
    assert "in ddpx-bob's name: ddpx-bob+linear_regression" in log and "made by another user, not ddpx-bob" in log
    assert "in ddpx-carol's name: ddpx-carol+linear_regression" in log and "is not a plain file or folder" in log
    # The feedback nbgrader releases for bob is named by his submission's secret: alice's forgery, whose
    # secret she knows, was not the one collected.
    bob_secret = next(
        a_class.students["bob"].home.glob(f".local/share/jupyter/nbgrader_cache/{COURSE_ID}/*/submission_secret.txt")
    )
    assert (submitted / "ddpx-bob" / ASSIGNMENT / "submission_secret.txt").read_text() == bob_secret.read_text()

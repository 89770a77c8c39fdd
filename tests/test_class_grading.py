"""`python -m autograder autograde`: a whole class with real nbgrader, several students at a time.

One course is prepared per module (students, generate_assignment, the sample
submissions of linear_regression) and copied for each test. The parallel
gradebook is compared, grade cell by grade cell, with serial nbgrader's.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import unprivileged
from conftest import processes_mentioning
from sample_grades import TOTAL, expected_score
from test_kernel_sandbox import live_processes_of

from autograder._files import chown_tree
from autograder.errors import CannotGrade
from autograder.nbgrader_ext import class_grading
from autograder.nbgrader_ext.class_grading import Outcome, autograde, gpu_slots
from autograder.nbgrader_ext.gradebook import MergeError, merge, scores
from autograder.nbgrader_ext.kernel import KERNEL_UID
from tools.demo import copy_course, nbgrader, nbgrader_env, submit

pytestmark = pytest.mark.nbgrader

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "samples"
ASSIGNMENT = "linear_regression"
STUDENTS = ("ada", "brook", "cy", "eve")  # cy is not in the gradebook: nbgrader adds her
# ada's answers are all right; cy hands in the release untouched; the cells brook and eve lose
# are sample_grades.py's FAILED_CELLS. Totals come from the checks' points, never typed here.
EXPECTED = {
    "ada": TOTAL[ASSIGNMENT],
    "brook": expected_score("brook", ASSIGNMENT),
    "cy": 0,
    "eve": expected_score("eve", ASSIGNMENT),
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    course = copy_course(tmp_path_factory.mktemp("class") / "course")
    for student in STUDENTS[:2] + STUDENTS[3:]:
        nbgrader(course, "db", "student", "add", student)
    nbgrader(course, "db", "assignment", "add", ASSIGNMENT)
    nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    for student in STUDENTS:
        submit(course, student, ASSIGNMENT, SAMPLES / student / ASSIGNMENT)
    return course


@pytest.fixture
def course(prepared, tmp_path) -> Path:
    return Path(shutil.copytree(prepared, tmp_path / "course"))


def run_cli(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", "autograde", *args],
        cwd=course,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )


def grade_rows(course: Path) -> dict:
    """(student, notebook, cell) -> every score and comment the gradebook holds of it."""
    db = sqlite3.connect(course / "gradebook.db")
    try:
        rows = db.execute(
            "SELECT sa.student_id, n.name, c.name, g.auto_score, g.manual_score, g.extra_credit, "
            "g.needs_manual_grade, m.auto_comment, m.manual_comment "
            "FROM grade g JOIN submitted_notebook sn ON g.notebook_id = sn.id "
            "JOIN submitted_assignment sa ON sn.assignment_id = sa.id "
            "JOIN notebook n ON sn.notebook_id = n.id JOIN base_cell c ON g.cell_id = c.id "
            "LEFT JOIN comment m ON m.notebook_id = sn.id AND m.cell_id = g.cell_id"
        ).fetchall()
    finally:
        db.close()
    return {row[:3]: row[3:] for row in rows}


# What differs between any two runs of one notebook: times, the decimals of runs that are not
# seeded (the serial script's losses), and which of the ranks that all fail fails first.
VARIES = re.compile(r"\d+\.\d+|\d+ ?s\b|(?<=[Rr]ank )\d")


def autograded_cells(course: Path, student: str) -> list:
    """Each cell's source and outputs, as far as two runs of the same notebook agree: stream text
    and errors with what varies masked (a stream's chunks joined: how the kernel's output was cut
    up depends on timing), and of a rich display (the report, with its plots) its kinds of data."""
    notebook = nbformat.read(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    cells = []
    for cell in notebook.cells:
        outputs = []
        for output in cell.get("outputs", []):
            if output["output_type"] in ("display_data", "execute_result"):
                outputs.append(sorted(output["data"]))
            elif output["output_type"] == "stream" and outputs and outputs[-1][0] == output["name"]:
                outputs[-1] = (output["name"], outputs[-1][1] + output["text"])
            elif output["output_type"] == "stream":
                outputs.append((output["name"], output["text"]))
            else:
                outputs.append((output["ename"], output["evalue"], output["traceback"]))
        cells.append((cell.source, VARIES.sub("N", str(outputs)), cell.metadata.get("nbgrader")))
    return cells


@pytest.fixture(scope="module")
def graded_in_parallel(prepared, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The class graded two at a time, once: the tests that start from a graded class copy it."""
    course = Path(shutil.copytree(prepared, tmp_path_factory.mktemp("parallel") / "course"))
    return course, run_cli(course, ASSIGNMENT, "--jobs", "2")


def test_parallel_gives_the_gradebook_serial_nbgrader_gives(prepared, graded_in_parallel, tmp_path):
    serial = Path(shutil.copytree(prepared, tmp_path / "serial"))
    nbgrader(serial, "autograde", ASSIGNMENT)
    course, done = graded_in_parallel
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Graded 4 students" in done.stdout and "2 at a time" in done.stdout
    expected = grade_rows(serial)
    assert {student for student, _, _ in expected} == set(STUDENTS)
    assert grade_rows(course) == expected
    for student in STUDENTS:
        assert autograded_cells(course, student) == autograded_cells(serial, student)
    found = scores(course, STUDENTS, [ASSIGNMENT])
    assert {s: found[s, ASSIGNMENT][0] for s in STUDENTS} == EXPECTED


def test_an_instructor_who_is_not_root_grades_the_same_and_a_kernel_cheat_gains_nothing(prepared, graded_in_parallel):
    """On a hub the instructor is an ordinary user: the kernels' sandbox is a user namespace, and the
    gradebook is root's, cell by cell. mallory, who replaces the grader's require() in her kernel, is
    there too."""
    course = Path(shutil.copytree(prepared, unprivileged.folder() / "course"))
    try:
        submit(course, "mallory", ASSIGNMENT, SAMPLES / "mallory" / ASSIGNMENT)
        chown_tree(course.parent, unprivileged.NOBODY, unprivileged.NOBODY)
        done = unprivileged.run(
            [sys.executable, "-m", "autograder", "autograde", ASSIGNMENT, "--jobs", "2"],
            cwd=course,
            home=course.parent / "home",
            timeout=900,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        root_graded = graded_in_parallel[0]
        assert {k: v for k, v in grade_rows(course).items() if k[0] != "mallory"} == grade_rows(root_graded)
        for student in STUDENTS:
            assert autograded_cells(course, student) == autograded_cells(root_graded, student)
        assert scores(course, ["mallory"], [ASSIGNMENT])["mallory", ASSIGNMENT][0] == expected_score(
            "mallory", ASSIGNMENT
        )
        assert not live_processes_of(unprivileged.NOBODY)
    finally:
        shutil.rmtree(course.parent, ignore_errors=True)


def test_several_assignments_in_one_call_start_the_lanes_once(course, monkeypatch):
    """--all grades every assignment someone submitted, in lanes started once for them all: a
    student's quiz beside the class's linear_regression, each merged with its own scores."""
    nbgrader(course, "generate_assignment", "ddp_intro", "--force")
    shutil.copytree(ROOT / "source" / "ddp_intro", course / "submitted" / "ada" / "ddp_intro")
    starts = []
    start = class_grading.Lane._start
    monkeypatch.setattr(class_grading.Lane, "_start", lambda lane: (starts.append(lane.number), start(lane))[1])
    assert class_grading.submitted_assignments(course) == [ASSIGNMENT, "ddp_intro"]
    runs = class_grading.autograde_course(course, class_grading.submitted_assignments(course), jobs=2)
    assert [(run.assignment, len(run.graded)) for run in runs] == [(ASSIGNMENT, 4), ("ddp_intro", 1)]
    assert not [o for run in runs for o in run.failures]
    assert sorted(starts) == [0, 1]  # once a lane, for five gradings of two assignments
    found = scores(course, STUDENTS, [ASSIGNMENT, "ddp_intro"])
    assert {s: found[s, ASSIGNMENT][0] for s in STUDENTS} == EXPECTED
    assert found["ada", "ddp_intro"][0] == TOTAL["ddp_intro"]


def test_a_rerun_grades_only_what_changed(graded_in_parallel, tmp_path):
    course = Path(shutil.copytree(graded_in_parallel[0], tmp_path / "course"))
    # cy hands in ada's notebook; ada's stays as it was.
    shutil.copy(
        course / "submitted" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
        course / "submitted" / "cy" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
    )
    done = run_cli(course, ASSIGNMENT, "--student", "ada", "--student", "cy")
    assert "Unchanged since last graded, left as they are: ada" in done.stdout
    assert "Graded 1 student in" in done.stdout
    assert scores(course, ["cy"], [ASSIGNMENT])["cy", ASSIGNMENT][0] == EXPECTED["ada"]  # ada's notebook
    forced = run_cli(course, ASSIGNMENT, "--student", "ada", "--force")
    assert "Graded 1 student in" in forced.stdout and "Unchanged since" not in forced.stdout


def test_a_broken_notebook_fails_alone(course):
    (course / "submitted" / "brook" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text("{ this is not a notebook")
    done = run_cli(course, ASSIGNMENT, "--student", "ada", "--student", "brook", "--jobs", "2")
    assert done.returncode == 1
    assert "brook: nbgrader exited with status 1" in done.stdout
    assert "brook's grading failed (nbgrader exited with status 1); the end of its log:" in done.stdout
    assert scores(course, ["ada"], [ASSIGNMENT])["ada", ASSIGNMENT][0] == EXPECTED["ada"]


def add_cell(course: Path, student: str, source: str) -> None:
    """The student's notebook gets a code cell of their own at its end."""
    path = course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(source))
    nbformat.write(notebook, path)


def class_helpers() -> list:
    """What a class's autograde starts: nbgrader (warm, or not), its kernels, the warm graders and their ranks."""
    return (
        live_processes_of(KERNEL_UID)
        + processes_mentioning("--student")
        + processes_mentioning("autograder.nbgrader_ext.warm_nbgrader")
        + processes_mentioning("/ddp-autograde-")  # the jobs' graders: their sockets are in the run's folder
    )


def test_a_grading_past_its_time_is_killed_and_reported_and_the_next_student_is_graded(course):
    add_cell(course, "ada", "import time\n\nwhile True:\n    time.sleep(1)")
    run = autograde(course, ASSIGNMENT, students=["ada", "brook"], jobs=1, timeout_s=25)
    assert [(o.student, o.returncode) for o in run.graded] == [("ada", None), ("brook", 0)]
    assert "Killed: the grading took longer than 25 s." in run.graded[0].log
    found = scores(course, ["brook"], [ASSIGNMENT])
    assert found["brook", ASSIGNMENT][0] == EXPECTED["brook"]  # in the same job, after the kill
    deadline = time.monotonic() + 10
    while (left := class_helpers()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left  # nbgrader, its kernel and the graders went with it


def test_a_student_s_kernel_cannot_reach_the_job_s_warm_grader(course):
    """The job's grader is nbgrader's: the kernel sees neither its address nor its socket."""
    add_cell(
        course,
        "ada",
        "import glob, os\n"
        "print('address:', os.environ.get('DDP_GRADER_SOCKET'))\n"
        "print('sockets:', glob.glob('/tmp/ddp-autograde-*/*'))",
    )
    run = autograde(course, ASSIGNMENT, students=["ada"])
    assert not run.failures, [o.log for o in run.failures]
    notebook = nbformat.read(course / "autograded" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    assert printed == "address: None\nsockets: []\n"
    assert scores(course, ["ada"], [ASSIGNMENT])["ada", ASSIGNMENT][0] == EXPECTED["ada"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nonexistent"], "There is no assignment 'nonexistent' in the gradebook."),
        ([ASSIGNMENT, "--jobs", "0"], "--jobs must be at least 1, not 0."),
        ([ASSIGNMENT, "--student", "zoe"], "No submission of 'linear_regression' from zoe."),
        ([], "Name the assignments to grade (one or more), or give --all; not both."),
        ([ASSIGNMENT, "--all"], "Name the assignments to grade (one or more), or give --all; not both."),
        ([ASSIGNMENT, "ddp_intro", "--slurm"], "On Slurm, one assignment a job: run the command once for each."),
        ([ASSIGNMENT, "nonexistent"], "There is no assignment 'nonexistent' in the gradebook."),
    ],
)
def test_bad_input_is_refused_with_a_reason(course, args, says):
    before = (course / "gradebook.db").read_bytes()
    done = run_cli(course, *args)
    assert done.returncode == 2
    assert says in " ".join(done.stderr.split())
    assert (course / "gradebook.db").read_bytes() == before


def test_no_submissions_and_no_gradebook_are_refused(course):
    shutil.rmtree(course / "submitted")
    assert "Nobody has submitted 'linear_regression'" in " ".join(run_cli(course, ASSIGNMENT).stderr.split())
    (course / "gradebook.db").unlink()
    assert "is not an nbgrader course directory with a gradebook" in " ".join(
        run_cli(course, ASSIGNMENT).stderr.split()
    )


def test_the_merge_is_one_transaction(course, tmp_path):
    good = tmp_path / "good.db"
    shutil.copyfile(course / "gradebook.db", good)
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database" * 100)
    before = (course / "gradebook.db").read_bytes()
    with pytest.raises(MergeError, match="broken.db"):
        merge(course / "gradebook.db", {"ada": good, "brook": broken}, ASSIGNMENT)
    assert (course / "gradebook.db").read_bytes() == before


def test_gpus_are_packed_so_that_none_is_shared():
    eight = [str(i) for i in range(8)]
    assert gpu_slots(eight, 2) == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]
    assert gpu_slots(eight, 3) == [["0", "1", "2"], ["3", "4", "5"]]
    assert gpu_slots(["0"], 2) == []


def test_each_job_gets_gpus_of_its_own(monkeypatch, tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_bytes(b"")
    students = [f"s{i}" for i in range(8)]
    monkeypatch.setattr(class_grading, "plan", lambda *a, **k: ({s: course for s in students}, []))
    monkeypatch.setattr(class_grading, "gpu_inventory", lambda: [str(i) for i in range(8)])
    monkeypatch.setattr(class_grading, "merge", lambda *a: None)
    monkeypatch.setattr(class_grading, "fingerprint", lambda folder: "")
    held, seen = set(), []

    def fake_grade(lane, course, assignment, student, db, timeout_s):
        gpus = lane.gpus
        assert not held & set(gpus), "two jobs share a GPU"
        held.update(gpus)
        seen.append(len(held) // 2)
        time.sleep(0.05)
        held.difference_update(gpus)
        return Outcome(student, 0, 0.05)

    monkeypatch.setattr(class_grading, "grade_one", fake_grade)
    run = autograde(course, ASSIGNMENT, jobs=8, backend="nccl", gpus_per_job=2)
    assert len(run.graded) == 8 and max(seen) <= 4  # 8 GPUs, 2 a job: 4 students at a time


def test_a_grading_that_raises_stops_the_class_with_its_own_error(monkeypatch, tmp_path):
    (tmp_path / "gradebook.db").write_bytes(b"")
    monkeypatch.setattr(class_grading, "plan", lambda *a, **k: ({"ada": tmp_path}, []))

    def broken_grade(lane, course, assignment, student, db, timeout_s):
        raise OSError("the disk is full")

    monkeypatch.setattr(class_grading, "grade_one", broken_grade)
    with pytest.raises(OSError, match="the disk is full"):  # not an UnboundLocalError that hides it
        autograde(tmp_path, ASSIGNMENT, jobs=1, backend="gloo")


def test_nccl_without_enough_gpus_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(class_grading, "plan", lambda *a, **k: ({}, []))
    monkeypatch.setattr(class_grading, "gpu_inventory", lambda: ["0"])
    with pytest.raises(CannotGrade, match="needs 3 GPUs per student, and this machine shows 1"):
        autograde(tmp_path, ASSIGNMENT, backend="nccl")


@pytest.mark.gpu
@pytest.mark.skipif(
    len(class_grading.gpu_inventory()) < 2 * class_grading.DEFAULT_GPUS_PER_JOB,
    reason=f"needs {2 * class_grading.DEFAULT_GPUS_PER_JOB} CUDA GPUs: two students at a time, 3 each",
)
def test_on_a_gpu_runner_concurrent_students_never_share_a_gpu(course, monkeypatch):
    """Real nbgrader on NCCL: two students at a time, each with GPUs no other running job has."""
    held, shared, real_grade_one = set(), [], class_grading.grade_one

    def watched(lane, course, assignment, student, db, timeout_s):
        gpus = lane.gpus
        shared.extend(held & set(gpus))
        held.update(gpus)
        try:
            return real_grade_one(lane, course, assignment, student, db, timeout_s)
        finally:
            held.difference_update(gpus)

    monkeypatch.setattr(class_grading, "grade_one", watched)
    run = autograde(course, ASSIGNMENT, jobs=2, backend="nccl", timeout_s=900)
    assert not run.failures, [o.log for o in run.failures]
    assert not shared, f"GPUs {sorted(set(shared))} were given to two running students"
    found = scores(course, STUDENTS, [ASSIGNMENT])
    assert {s: found[s, ASSIGNMENT][0] for s in STUDENTS} == EXPECTED

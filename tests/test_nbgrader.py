"""The course through real nbgrader commands, as nbgrader's own tests do it: a temporary course
directory (nbgrader_config.py + source/), `db student add`, `db assignment add`,
`generate_assignment`, submissions in submitted/<student>/<assignment>/, `autograde`,
`generate_feedback`, `export`; then exact scores from nbgrader's Gradebook.

Students:
    perfect   the source notebooks, solutions and all
    blank     the release, untouched
    brook     tests/samples/brook: classic mistakes in every assignment
    dana      tests/samples/dana: linear_regression without a DistributedSampler
    eve       tests/samples/eve: linear_regression that crashes at its checkpoint (partial credit)
    mallory   tests/samples/mallory: cheats: quiz answers that claim to equal anything, and a cell
              that replaces the grader's require() in the kernel; she earns nothing
"""

from __future__ import annotations

import csv
import html
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.exercises import ASSIGNMENTS, EXERCISES, by_assignment
from autograder.judge.checks import by_id
from autograder.nbgrader_ext.preprocessors import ClearHiddenTestTracebacks
from tools.demo import copy_course, nbgrader, submit

pytestmark = pytest.mark.nbgrader

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "samples"
QUIZ_POINTS = {
    "q1_effective_batch_size_test": 1,
    "q2_checkpoint_rank_test": 1,
    "q3_sampler_answer_test": 1,
    "q4a_samples_per_rank_test": 1,
    "q4b_rank1_indices_test": 2,
    "q5_ddp_key_prefix_test": 1,
}
TOTAL = {"ddp_intro": sum(QUIZ_POINTS.values())} | {
    e.assignment: sum(by_id(c).points for c in e.graded_checks) for e in EXERCISES.values()
}
SUBMISSIONS = {
    "perfect": ASSIGNMENTS,
    "blank": ASSIGNMENTS,
    "brook": ASSIGNMENTS,
    "dana": ("linear_regression",),
    "eve": ("linear_regression",),
    "mallory": ("ddp_intro", "linear_regression"),
}


def points_of(check_id: str) -> float:
    return by_id(check_id).points


# The grade cells each sample fails, and nothing else.
FAILED_CELLS = {
    ("brook", "ddp_intro"): {
        "q1_effective_batch_size_test": 1,  # 512 / 4 is 128.0, a float: the hidden test
        "q4a_samples_per_rank_test": 1,  # forgot the padding: 3 instead of 4
        "q4b_rank1_indices_test": 2,
    },
    ("brook", "linear_regression"): {
        "lr_set_epoch": points_of("set_epoch"),  # never calls set_epoch
        "lr_checkpoint_loadable": points_of("checkpoint_loadable"),  # saves "module." keys
        "lr_launcher": points_of("launcher"),  # starts torch.cuda.device_count() ranks: 0 on a CPU
    },
    ("brook", "mnist_ddp"): {
        "mnist_rank0_checkpoint": points_of("rank0_checkpoint"),  # every rank saves ...
        "mnist_rank0_logs": points_of("rank0_logs"),
    },  # ... and prints
    # No DistributedSampler: the checks of its use have nothing to judge, and give no points.
    ("dana", "linear_regression"): {
        f"lr_{check_id}": points_of(check_id) for check_id in ("distributed_sampler", "same_dataset", "set_epoch")
    },
    # model.modules when saving: the run crashes after 5 epochs. What ran before is judged on its
    # evidence; the checks it never reached fail.
    ("eve", "linear_regression"): {
        f"lr_{check_id}": points_of(check_id)
        for check_id in ("rank0_checkpoint", "checkpoint_loadable", "rank0_logs", "cleanup", "launcher")
    },
    # The quiz cells check exact types, and the DDP cells' outputs come from a grading outside the
    # kernel: every cell fails, as for the release untouched.
    ("mallory", "ddp_intro"): QUIZ_POINTS,
    ("mallory", "linear_regression"): {
        f"lr_{check_id}": points_of(check_id) for check_id in by_assignment("linear_regression").graded_checks
    },
}


AUTOGRADE_SECONDS: dict[str, float] = {}


def expected_score(student: str, assignment: str) -> float:
    if student == "blank":
        return 0
    return TOTAL[assignment] - sum(FAILED_CELLS.get((student, assignment), {}).values())


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = copy_course(tmp_path_factory.mktemp("course"))
    for student in SUBMISSIONS:
        nbgrader(course, "db", "student", "add", student, f"--last-name={student.title()}")
    for assignment in ASSIGNMENTS:
        nbgrader(course, "db", "assignment", "add", assignment)
        nbgrader(course, "generate_assignment", assignment)
    for student, assignments in SUBMISSIONS.items():
        for assignment in assignments:
            target = course / "submitted" / student / assignment
            if student == "perfect":
                shutil.copytree(ROOT / "source" / assignment, target)
            else:
                submit(course, student, assignment, SAMPLES / student / assignment if student != "blank" else None)
    for assignment in ASSIGNMENTS:
        started = time.monotonic()
        nbgrader(course, "autograde", assignment)
        AUTOGRADE_SECONDS[assignment] = time.monotonic() - started
    for assignment in ASSIGNMENTS:
        nbgrader(course, "generate_feedback", assignment)
    nbgrader(course, "export")
    return course


def gradebook(course: Path) -> Gradebook:
    return Gradebook("sqlite:///" + str(course / "gradebook.db"), "ddp-course")


def masked(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", text)


def feedback_text(course: Path, student: str, assignment: str) -> str:
    """The feedback page as a student reads it: tags stripped, entities decoded."""
    [page] = (course / "feedback" / student / assignment).glob("*.html")
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_exact_scores(course):
    with gradebook(course) as gb:
        for student, assignments in SUBMISSIONS.items():
            for assignment in assignments:
                submission = gb.find_submission(assignment, student)
                assert submission.max_score == TOTAL[assignment]
                assert submission.score == expected_score(student, assignment), (student, assignment)


def test_each_failed_check_costs_exactly_its_cell(course):
    with gradebook(course) as gb:
        for student, assignments in SUBMISSIONS.items():
            if student == "blank":
                continue
            for assignment in assignments:
                failed = FAILED_CELLS.get((student, assignment), {})
                [notebook] = gb.find_submission(assignment, student).notebooks
                for grade in notebook.grades:
                    lost = grade.max_score - grade.score
                    assert lost == failed.get(grade.name, 0), (student, assignment, grade.name, grade.score)


@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if by_assignment(a)])
def test_one_grade_cell_per_check_with_its_points(course, assignment):
    exercise = by_assignment(assignment)
    with gradebook(course) as gb:
        [notebook] = gb.find_assignment(assignment).notebooks
        cells = {cell.name: cell.max_score for cell in notebook.grade_cells}
    assert cells == {exercise.grade_id(check_id): points_of(check_id) for check_id in exercise.graded_checks}


def test_blank_fails_every_cell_in_plain_words(course):
    text = feedback_text(course, "blank", "linear_regression")
    assert text.count("CheckFailed: ") == len(by_assignment("linear_regression").graded_checks)
    assert "NotImplementedError" in text  # what stopped the run, for every check


def test_feedback_explains_each_failure_with_the_checks_message(course):
    """The words the student reads are the grader's own message and hint for that check."""
    from autograder.notebook.client import run

    for (student, assignment), cells in FAILED_CELLS.items():
        exercise = by_assignment(assignment)
        if exercise is None:
            continue
        report = run(course / "autograded" / student / assignment / exercise.program, exercise.name)
        text = feedback_text(course, student, assignment)
        for cell in cells:
            verdict = report.check(cell.removeprefix(exercise.grade_id_prefix + "_"))
            assert verdict.status == "failed"
            # The numbers of a line a check quotes differ from run to run (the losses of an unseeded model).
            # After a crash the cell puts the run's error between the heading and the message.
            run_error = f"\nThe run: {report.error}\n" if report.error else ": "
            said = f"{verdict.title} (checked with 2 ranks){run_error}"
            assert masked(said + verdict.message) in masked(text), (student, cell)
            assert f"Hint: {verdict.hint}" in text


def test_the_check_cell_shows_the_report_of_the_grading_outside_the_kernel(course):
    """The kernel grades nothing under autograde; the feedback's report is the sandboxed grading's."""
    from autograder.nbgrader_ext.preprocessors import CHECK_CALL
    from autograder.notebook.client import run
    from autograder.reports.html import render

    def failed_rows(html: str) -> set[str]:
        return set(re.findall(r'data-check="(\w+)" data-status="failed"', html))

    for student, assignment in FAILED_CELLS:
        exercise = by_assignment(assignment)
        if exercise is None:
            continue
        notebook = next((course / "autograded" / student / assignment).glob("*.ipynb"))
        [cell] = [c for c in nbformat.read(notebook, as_version=4).cells if CHECK_CALL.search(c.source)]
        [output] = cell.outputs
        graded_here = render(run(course / "autograded" / student / assignment / exercise.program, exercise.name))
        assert failed_rows(output.data["text/html"]) == failed_rows(graded_here), (student, assignment)
        assert failed_rows(graded_here), (student, assignment)  # mallory's patched kernel included


def test_feedback_never_shows_hidden_tests(course):
    hidden_region = ClearHiddenTestTracebacks().hidden_lines  # the same reading as the feedback's preprocessor
    hidden = set()
    for notebook in (ROOT / "source").glob("*/*.ipynb"):
        for cell in nbformat.read(notebook, as_version=4).cells:
            hidden |= hidden_region(cell.source)
    assert len(hidden) > 30
    pages = 0
    for student, assignments in SUBMISSIONS.items():
        for assignment in assignments:
            text = feedback_text(course, student, assignment)
            pages += 1
            leaked = sorted(line for line in hidden if line in text)
            assert not leaked, (student, assignment, leaked[:3])
    assert pages == sum(len(a) for a in SUBMISSIONS.values())
    # brook's hidden test failed (128.0 is not an int): its message, written for students, is shown.
    assert "give an int, not a float" in feedback_text(course, "brook", "ddp_intro")


def test_export_has_every_grade(course):
    with open(course / "grades.csv", newline="") as handle:
        rows = {(row["student_id"], row["assignment"]): float(row["raw_score"]) for row in csv.DictReader(handle)}
    for student, assignments in SUBMISSIONS.items():
        for assignment in assignments:
            assert rows[student, assignment] == expected_score(student, assignment)


def test_autograde_time(course):
    """Keeps the cost of grading in view: one assignment's autograde (all its students)."""
    print({assignment: round(seconds, 1) for assignment, seconds in AUTOGRADE_SECONDS.items()})
    assert set(AUTOGRADE_SECONDS) == set(ASSIGNMENTS)
    assert all(seconds < 600 for seconds in AUTOGRADE_SECONDS.values())

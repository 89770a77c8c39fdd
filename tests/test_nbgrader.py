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
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from conftest import CHROMIUM, CHROMIUM_FLAGS, run_cli
from nbgrader.api import Gradebook
from sample_grades import FAILED_CELLS, TOTAL, expected_score, points_of

from autograder.exercises import ASSIGNMENTS, EXERCISES, by_assignment
from autograder.judge.checks import by_id
from autograder.nbgrader_ext import class_report
from autograder.nbgrader_ext.preprocessors import RUNS_METADATA, ClearHiddenTestTracebacks
from autograder.schema.run import DEFAULT_WORLD_SIZE
from autograder.wording import points
from tools.demo import copy_course, nbgrader, submit

pytestmark = pytest.mark.nbgrader

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "samples"
SUBMISSIONS = {
    "perfect": ASSIGNMENTS,
    "blank": ASSIGNMENTS,
    "brook": ASSIGNMENTS,
    "dana": ("linear_regression",),
    "eve": ("linear_regression", "fault_tolerance"),
    "mallory": ("ddp_intro", "linear_regression"),
}


AUTOGRADE_SECONDS: dict[str, float] = {}


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


def graded_runs(course: Path, student: str, exercise) -> dict:
    """How the autograde's gradings of this student's program went, by world size, as
    the autograded notebook keeps them: the runs its grade cells and check cell show."""
    notebook = nbformat.read(course / "autograded" / student / exercise.assignment / f"{exercise.assignment}.ipynb", 4)
    return notebook.metadata[RUNS_METADATA]


def test_feedback_explains_each_failure_with_the_checks_message(course):
    """The words the student reads are the grader's own message and hint for that check."""
    for (student, assignment), cells in FAILED_CELLS.items():
        exercise = by_assignment(assignment)
        if exercise is None:
            continue
        run = graded_runs(course, student, exercise)[str(DEFAULT_WORLD_SIZE)]
        text = feedback_text(course, student, assignment)
        for cell in cells:
            check_id = cell.removeprefix(exercise.grade_id_prefix + "_")
            missed = run["missed"][check_id]
            # After a crash the cell puts the run's error between the heading and the message.
            run_error = f"\nThe run: {run['error']}\n" if run["error"] else ": "
            said = f"{by_id(check_id).title} (checked with {DEFAULT_WORLD_SIZE} ranks){run_error}"
            assert said + missed["message"] in text, (student, cell)
            assert f"Hint: {missed['hint']}" in text


def test_the_check_cell_shows_the_report_of_the_grading_outside_the_kernel(course):
    """The kernel grades nothing under autograde; the feedback's report is the sandboxed grading's."""
    from autograder.nbgrader_ext.preprocessors import CHECK_CALL

    def failed_rows(html: str) -> set[str]:
        return set(re.findall(r'data-check="(\w+)" data-status="failed"', html))

    for student, assignment in FAILED_CELLS:
        exercise = by_assignment(assignment)
        if exercise is None:
            continue
        notebook = next((course / "autograded" / student / assignment).glob("*.ipynb"))
        [cell] = [c for c in nbformat.read(notebook, as_version=4).cells if CHECK_CALL.search(c.source)]
        [output] = cell.outputs
        run = graded_runs(course, student, exercise)[str(DEFAULT_WORLD_SIZE)]
        graded_outside = set(run["failed"]) | ({"not_reached"} if run["not_reached"] else set())
        assert failed_rows(output.data["text/html"]) == graded_outside, (student, assignment)
        assert graded_outside, (student, assignment)  # mallory's patched kernel included


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


# --- the gradebook, for LMSs and TAs: python -m autograder export / class-report ---


def exported(course: Path, tmp_path: Path, assignment: str, form: str) -> list[list[str]]:
    output = tmp_path / f"{assignment}-{form}.csv"
    result = run_cli("export", assignment, "--format", form, "-o", str(output), "--course", str(course))
    assert result.returncode == 0, result.stderr
    with open(output, newline="") as handle:
        return list(csv.reader(handle))


def shown_score(student: str, assignment: str) -> str:
    """What an export holds for the student: empty where nothing was submitted, never 0."""
    return points(expected_score(student, assignment)) if assignment in SUBMISSIONS[student] else ""


def test_export_csv_gives_a_total_per_assignment_and_an_empty_cell_where_nothing_was_submitted(course, tmp_path):
    rows = exported(course, tmp_path, "all", "csv")
    assignments = sorted(ASSIGNMENTS)
    assert rows[0] == ["Student ID", "Last name", "First name", "Email"] + [
        f"{a} (of {points(TOTAL[a])})" for a in assignments
    ]
    assert rows[1:] == [
        [student, student.title(), "", "", *(shown_score(student, a) for a in assignments)]
        for student in sorted(SUBMISSIONS)
    ]
    dana = rows[1 + sorted(SUBMISSIONS).index("dana")][4:]
    assert dana == ["" if a != "linear_regression" else shown_score("dana", a) for a in assignments]
    assert dana.count("") == len(ASSIGNMENTS) - 1


def test_export_canvas_has_canvas_s_import_columns_and_points_possible_row(course, tmp_path):
    rows = exported(course, tmp_path, "linear_regression", "canvas")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "linear_regression"]
    assert rows[1] == ["Points Possible", "", "", "", "", points(TOTAL["linear_regression"])]
    assert rows[2:] == [
        [student.title(), "", "", student, "", shown_score(student, "linear_regression")]
        for student in sorted(SUBMISSIONS)
    ]


def test_export_per_check_has_a_column_per_grade_cell_in_the_checks_order(course, tmp_path):
    rows = exported(course, tmp_path, "linear_regression", "per-check")
    exercise = EXERCISES["linear_regression"]
    assert rows[0][4:] == [
        f"linear_regression: {by_id(c).title} (of {points(points_of(c))})" for c in exercise.graded_checks
    ]
    for row in rows[1:]:
        student = row[0]
        failed = FAILED_CELLS.get((student, "linear_regression"), {})
        if "linear_regression" not in SUBMISSIONS[student]:
            expected = [""] * len(exercise.graded_checks)
        else:
            expected = [
                "0" if student == "blank" or exercise.grade_id(c) in failed else points(points_of(c))
                for c in exercise.graded_checks
            ]
        assert row[4:] == expected, student


def test_class_report_counts_each_check_and_names_the_students_behind_each_failure(course, tmp_path):
    page = tmp_path / "report.html"
    result = run_cli("class-report", "linear_regression", "--html", str(page), "--course", str(course))
    assert result.returncode == 0, result.stderr
    report = class_report.build(course, "linear_regression")
    exercise = EXERCISES["linear_regression"]
    submitted = [s for s, assignments in SUBMISSIONS.items() if "linear_regression" in assignments]
    assert report.scores == {s: expected_score(s, "linear_regression") for s in submitted}
    expected_rates = {
        by_id(c).title: sum(
            s != "blank" and exercise.grade_id(c) not in FAILED_CELLS.get((s, "linear_regression"), {})
            for s in submitted
        )
        for c in exercise.graded_checks
    }
    assert {r.title: r.passed for r in report.pass_rates} == expected_rates
    assert all(r.graded == len(submitted) for r in report.pass_rates)
    by_check = defaultdict(set)
    for failure in report.failures:
        by_check[failure.title].update(failure.students)
    assert {"brook"} <= by_check[by_id("set_epoch").title]
    assert {"dana"} <= by_check[by_id("distributed_sampler").title]
    sampler = next(f for f in report.failures if f.title == by_id("distributed_sampler").title)
    assert sampler.check == f"{sampler.title} (2 and 3 ranks)"  # one row for the message seen at both sizes
    assert "perfect" not in {s for students in by_check.values() for s in students}
    # eve's run crashes at its checkpoint, at both world sizes; perfect's runs end on their own.
    assert [how.split(":")[0] for how in report.stopped["eve"]] == ["2 ranks", "3 ranks"]
    assert "perfect" not in report.stopped
    assert report.summary in result.stdout and "Each check's pass rate" in result.stdout
    assert len({(f.title, f.message) for f in report.failures}) == len(report.failures)
    assert "eve" in page.read_text()


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_class_report_page_renders_its_charts_in_a_browser(course, tmp_path):
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "report.html"
    class_report.write(class_report.build(course, "linear_regression"), page_path)
    artifacts = ROOT / "artifacts" / "class_report"
    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(page_path.as_uri())
            widths = page.eval_on_selector_all("img", "images => images.map(i => i.complete ? i.naturalWidth : 0)")
            headings = page.eval_on_selector_all("h2", "hs => hs.map(h => h.textContent)")
            page.screenshot(path=str(artifacts / "linear_regression.png"), full_page=True)
        finally:
            browser.close()
    assert len(widths) == 2 and all(width > 300 for width in widths)
    assert headings == ["Scores", "Each check's pass rate", "The most common failures", "Runs that crashed or hung"]
    assert (artifacts / "linear_regression.png").stat().st_size > 20_000


def test_exports_and_the_class_report_refuse_bad_input_with_a_message(course, tmp_path):
    def refused(*args: str) -> str:
        result = run_cli(*args)
        assert result.returncode == 2, result.stdout + result.stderr
        return result.stderr

    output = tmp_path / "out.csv"
    assert "There is no assignment 'nope'" in refused("export", "nope", "-o", str(output), "--course", str(course))
    assert "There is no assignment 'nope'" in refused("class-report", "nope", "--course", str(course))
    assert "no gradebook.db" in refused("export", "all", "-o", str(output), "--course", str(tmp_path))
    assert "no gradebook.db" in refused("class-report", "linear_regression", "--course", str(tmp_path))
    assert "Cannot write" in refused("export", "all", "-o", str(tmp_path), "--course", str(course))
    assert "Cannot write" in refused(
        "class-report", "linear_regression", "--html", str(tmp_path), "--course", str(course)
    )
    assert not output.exists()


def test_an_assignment_nobody_submitted_exports_empty_cells_and_has_no_class_report(tmp_path):
    course = copy_course(tmp_path / "course")
    nbgrader(course, "db", "student", "add", "ada", "--last-name=Lovelace", "--first-name=Ada")
    nbgrader(course, "db", "assignment", "add", "linear_regression")
    output = tmp_path / "grades.csv"
    result = run_cli("export", "linear_regression", "--format", "canvas", "-o", str(output), "--course", str(course))
    assert result.returncode == 0 and "Nobody has a graded submission of linear_regression" in result.stderr
    with open(output, newline="") as handle:
        assert list(csv.reader(handle))[2] == ["Lovelace, Ada", "", "", "ada", "", ""]
    refused = run_cli("class-report", "linear_regression", "--course", str(course))
    assert refused.returncode == 2 and "nothing to report" in refused.stderr


def test_autograde_time(course):
    """Keeps the cost of grading in view: one assignment's autograde (all its students)."""
    print({assignment: round(seconds, 1) for assignment, seconds in AUTOGRADE_SECONDS.items()})
    assert set(AUTOGRADE_SECONDS) == set(ASSIGNMENTS)
    assert all(seconds < 600 for seconds in AUTOGRADE_SECONDS.values())

"""The gradebook, for where grades go next:

    python -m autograder export ASSIGNMENT|all --format csv|canvas|per-check -o FILE

- csv: a row per student, a column per assignment with the student's total;
- canvas: the columns of Canvas's gradebook import (Student, ID, SIS User ID,
  SIS Login ID, Section, then an assignment per column) and its
  "Points Possible" row, so the file imports into Canvas as it is;
- per-check: a row per student, a column per grade cell, for TAs.

A student with no submission gets an empty cell, never a 0: an LMS leaves a
blank alone, and a TA can tell "did not submit" from "got nothing".
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .._files import replacing
from ..exercises import by_assignment
from ..judge.checks import by_id
from ..wording import points
from .gradebook import COURSE_ID

FORMATS = ("csv", "canvas", "per-check")
CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


class CourseError(Exception):
    """What was asked of the course's gradebook cannot be given; nothing was written."""


@dataclass(frozen=True)
class Student:
    id: str
    first_name: str
    last_name: str
    email: str
    lms_user_id: str


@dataclass(frozen=True)
class Column:
    heading: str  # in the file
    title: str  # what it scores: an assignment, a check, a quiz cell
    max_score: float
    scores: dict[str, float]  # student -> score; a student not in it submitted nothing


def open_gradebook(course: Path):
    from nbgrader.api import Gradebook

    database = course / "gradebook.db"
    if not database.is_file():
        raise CourseError(f"There is no gradebook.db in {course}: this is not a graded nbgrader course.")
    return Gradebook(f"sqlite:///{database}", COURSE_ID)


def chosen_assignments(gb, asked: str) -> list[str]:
    known = [a.name for a in sorted(gb.assignments, key=lambda a: a.name)]
    if not known:
        raise CourseError("The gradebook has no assignments yet: add and grade one first.")
    if asked == "all":
        return known
    if asked not in known:
        raise CourseError(f"There is no assignment {asked!r} in the gradebook. It has: {', '.join(known)}.")
    return [asked]


def _students(gb) -> list[Student]:
    return [
        Student(s.id, s.first_name or "", s.last_name or "", s.email or "", s.lms_user_id or "")
        for s in sorted(gb.students, key=lambda s: s.id)
    ]


def _totals(gb, assignment: str) -> Column:
    found = {s.student.id: s.score for s in gb.assignment_submissions(assignment)}
    return Column(assignment, assignment, gb.find_assignment(assignment).max_score, found)


def cell_title(assignment: str, cell: str) -> str:
    """What a grade cell scores: a DDP exercise's check by its title, a quiz cell by its name."""
    exercise = by_assignment(assignment)
    check = next((c for c in exercise.graded_checks if exercise.grade_id(c) == cell), None) if exercise else None
    return by_id(check).title if check else cell


def cell_columns(gb, assignment: str) -> list[Column]:
    """A column per grade cell: a DDP exercise's in its checks' order, a quiz's by name."""
    exercise = by_assignment(assignment)
    order = {exercise.grade_id(c): i for i, c in enumerate(exercise.graded_checks)} if exercise else {}
    cells = sorted(
        (
            (notebook.name, cell.name, cell.max_score)
            for notebook in gb.find_assignment(assignment).notebooks
            for cell in notebook.grade_cells
        ),
        key=lambda cell: (cell[0], order.get(cell[1], len(order)), cell[1]),
    )
    scores = {(notebook, name): {} for notebook, name, _ in cells}
    for submission in gb.assignment_submissions(assignment):
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                scores[notebook.name, grade.name][submission.student.id] = grade.score
    columns = []
    for notebook, name, maximum in cells:
        title = cell_title(assignment, name)
        columns.append(Column(f"{assignment}: {title}", title, maximum, scores[notebook, name]))
    return columns


def columns(course: Path, asked: str, form: str) -> tuple[list[Student], list[Column], list[str]]:
    """The students, the export's score columns, and the assignments nobody has a grade in."""
    if form not in FORMATS:
        raise CourseError(f"Unknown format {form!r}. Choose one of: {', '.join(FORMATS)}.")
    with open_gradebook(course) as gb:
        assignments = chosen_assignments(gb, asked)
        students = _students(gb)
        if not students:
            raise CourseError("The gradebook has no students yet: nothing to export.")
        found = []
        for assignment in assignments:
            found += cell_columns(gb, assignment) if form == "per-check" else [_totals(gb, assignment)]
        unsubmitted = [a for a in assignments if not gb.assignment_submissions(a)]
    return students, found, unsubmitted


def _score(column: Column, student: str) -> str:
    score = column.scores.get(student)
    return "" if score is None else points(score)


def rows(students: list[Student], found: list[Column], form: str) -> list[list[str]]:
    if form == "canvas":
        head = [*CANVAS_IDENTITY, *(c.heading for c in found)]
        possible = ["Points Possible", "", "", "", "", *(points(c.max_score) for c in found)]
        body = [[_canvas_name(s), s.lms_user_id, "", s.id, "", *(_score(c, s.id) for c in found)] for s in students]
        return [head, possible, *body]
    head = [
        "Student ID",
        "Last name",
        "First name",
        "Email",
        *(f"{c.heading} (of {points(c.max_score)})" for c in found),
    ]
    return [head, *([s.id, s.last_name, s.first_name, s.email, *(_score(c, s.id) for c in found)] for s in students)]


def _canvas_name(student: Student) -> str:
    """Canvas shows "Last, First"; the id stands in where the gradebook has no name."""
    if student.last_name and student.first_name:
        return f"{student.last_name}, {student.first_name}"
    return student.last_name or student.first_name or student.id


def export(course: Path, asked: str, form: str, output: Path) -> tuple[int, list[str]]:
    """Write the file in one step; (rows of students written, assignments nobody has a grade in)."""
    students, found, unsubmitted = columns(course, asked, form)
    table = rows(students, found, form)
    try:
        with replacing(output) as file:
            csv.writer(file).writerows(table)
    except OSError as error:
        raise CourseError(f"Cannot write {output}: {error.strerror or error}.") from error
    return len(students), unsubmitted

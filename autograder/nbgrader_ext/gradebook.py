"""nbgrader's gradebook.db, read and merged.

`merge` moves graded submissions from private gradebooks (each a copy of the
course's, that one nbgrader autograde wrote into) into the course's
gradebook, in one transaction: either every submission arrives or none does.
It copies rows, so what lands is what nbgrader itself wrote: every grade
cell's scores and every comment.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# A submission's rows, from its student to its comments: (table, the column
# that ties a row to the rows above it, the table that column points into).
SUBMISSION_TABLES = (
    ("submitted_assignment", "id", None),
    ("submitted_notebook", "assignment_id", "submitted_assignment"),
    ("grade", "notebook_id", "submitted_notebook"),
    ("comment", "notebook_id", "submitted_notebook"),
)
COURSE_ID = "ddp-course"


class MergeError(Exception):
    """A private gradebook could not be read; the course's gradebook is untouched."""


def _submission_ids(db: sqlite3.Connection, assignment: str, student: str) -> list[str]:
    return [
        row[0]
        for row in db.execute(
            "SELECT s.id FROM submitted_assignment s JOIN assignment a ON s.assignment_id = a.id "
            "WHERE a.name = ? AND s.student_id = ?",
            (assignment, student),
        )
    ]


def _rows(db: sqlite3.Connection, table: str, column: str, values: list[str]) -> tuple[list[str], list[tuple]]:
    if not values:
        return [], []
    cursor = db.execute(f"SELECT * FROM {table} WHERE {column} IN ({','.join('?' * len(values))})", values)
    return [d[0] for d in cursor.description], cursor.fetchall()


def submission_rows(db_path: Path, assignment: str, student: str) -> dict[str, tuple[list[str], list[tuple]]]:
    """Every row of one student's submission of an assignment, and the student's own row."""
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            found = {"student": _rows(db, "student", "id", [student])}
            ids = {"submitted_assignment": _submission_ids(db, assignment, student)}
            for table, column, parent in SUBMISSION_TABLES:
                columns, rows = _rows(db, table, column, ids[parent or table])
                found[table] = (columns, rows)
                ids[table] = [row[columns.index("id")] for row in rows]
            return found
        finally:
            db.close()
    except sqlite3.Error as error:
        raise MergeError(f"{db_path.name}: {error}") from error


def merge(course_db: Path, private: dict[str, Path], assignment: str) -> None:
    """Put each student's submission from their private gradebook into the
    course's, replacing what the course's held of it: one transaction."""
    incoming = {student: submission_rows(path, assignment, student) for student, path in private.items()}
    db = sqlite3.connect(course_db, timeout=60)
    try:
        with db:  # commits at the end, or rolls everything back
            for student, tables in incoming.items():
                _delete_submission(db, assignment, student)
                for table, (columns, rows) in tables.items():
                    if rows:
                        verb = "INSERT OR IGNORE" if table == "student" else "INSERT"  # a student is kept as it was
                        marks = ",".join("?" * len(columns))
                        db.executemany(f"{verb} INTO {table} ({','.join(columns)}) VALUES ({marks})", rows)
    finally:
        db.close()


def _delete_submission(db: sqlite3.Connection, assignment: str, student: str) -> None:
    ids = _submission_ids(db, assignment, student)
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    notebooks = [r[0] for r in db.execute(f"SELECT id FROM submitted_notebook WHERE assignment_id IN ({marks})", ids)]
    if notebooks:
        notebook_marks = ",".join("?" * len(notebooks))
        for table in ("grade", "comment"):
            db.execute(f"DELETE FROM {table} WHERE notebook_id IN ({notebook_marks})", notebooks)
    db.execute(f"DELETE FROM submitted_notebook WHERE assignment_id IN ({marks})", ids)
    db.execute(f"DELETE FROM submitted_assignment WHERE id IN ({marks})", ids)


def scores(course: Path, students, assignments) -> dict[tuple[str, str], tuple[float | None, float]]:
    """(student, assignment) -> (score, max score); score None where nothing was submitted."""
    from nbgrader.api import Gradebook, MissingEntry

    found = {}
    with Gradebook("sqlite:///" + str(course / "gradebook.db"), COURSE_ID) as gb:
        for student in students:
            for assignment in assignments:
                try:
                    submission = gb.find_submission(assignment, student)
                    found[student, assignment] = (submission.score, submission.max_score)
                except MissingEntry:
                    found[student, assignment] = (None, gb.find_assignment(assignment).max_score)
    return found


def scores_table(course: Path, students: dict[str, str], assignments: list[str]):
    """A rich table of the gradebook's scores: a row per student (with a note), a column per assignment."""
    from rich import box
    from rich.table import Table

    from ..wording import points

    shown = lambda value: "-" if value is None else points(value)  # noqa: E731
    found = scores(course, students, assignments)
    table = Table(title="Grades (from nbgrader's gradebook)", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("Student")
    table.add_column("Note", max_width=18)
    for assignment in assignments:
        table.add_column(assignment, justify="right")
    table.add_column("Total", justify="right", style="bold")
    for student, note in students.items():
        row = [f"{shown(found[student, a][0])}/{shown(found[student, a][1])}" for a in assignments]
        total = sum(found[student, a][0] or 0 for a in assignments)
        maximum = sum(found[student, a][1] for a in assignments)
        table.add_row(student, note, *row, f"{shown(total)}/{shown(maximum)}")
    return table

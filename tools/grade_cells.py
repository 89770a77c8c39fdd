"""`python -m tools.grade_cells [--check]`: write what is generated from the
checks, so they are its one source of truth: the DDP notebooks' grade cells
and points tables, the README's tables of checks, and the expected scores
of the sample students in tests/samples/README.md.

For each exercise (autograder.exercises) its source notebook gets one grade
cell per graded check, in the report's order: the check's points, a heading
with the change it checks, the visible 2-rank `require` and the hidden 3-rank
one. The points table in the grading section's markdown is written from the
same list. This is what nbgrader's InstantiateTests does for its tests: the
notebook is built from data, never kept in step by hand. A new check is then
its function, its catalogue rows and a rerun of this tool (and of
`nbgrader generate_assignment --force` for the release).

The README's tables give each check's points and what it passes when (its
docstring); the samples' scores come from
tests/sample_grades.py, which the nbgrader tests hold the real grades to.

`--check` writes nothing; it exits 1 and names each file that is stale.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

from autograder.exercises import ALSO_UNDER_TORCHRUN, ASSIGNMENTS, EXERCISES, Exercise
from autograder.judge.checks import Check, all_checks, by_id
from autograder.schema.run import HIDDEN_WORLD_SIZE
from autograder.wording import plural, points

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TABLE = re.compile(r"^\| Check \| What it checks \| Points \|\n(?:\|.*\n?)*?\| \| \*\*Total\*\* \|.*$", re.MULTILINE)


def grade_cell_source(exercise: Exercise, check_id: str) -> str:
    check = by_id(check_id)
    call = f'require("{exercise.program}", "{exercise.name}", "{check_id}"'
    return (
        f"# {check.change}: {check.title} ({plural(check.points, 'point')})\n"
        "from autograder.notebook.grade_cells import require\n"
        f"{call})\n"
        "### BEGIN HIDDEN TESTS\n"
        f"{call}, world_size={HIDDEN_WORLD_SIZE})\n"
        "### END HIDDEN TESTS"
    )


def points_table(exercise: Exercise) -> str:
    rows = ["| Check | What it checks | Points |", "|---|---|---|"]
    for check_id in exercise.graded_checks:
        check = by_id(check_id)
        rows.append(f"| `{check_id}` | {check.change}: {check.title} | {points(check.points)} |")
    total = sum(by_id(c).points for c in exercise.graded_checks)
    return "\n".join([*rows, f"| | **Total** | **{points(total)}** |"])


def grade_cells(exercise: Exercise, ids: dict[str, str] | None = None) -> list[nbformat.NotebookNode]:
    """One grade cell per graded check, in check order. `ids` maps a grade_id to the cell id it
    already has, so a regenerated cell keeps its id and the diff stays small; a new one gets a fresh id."""
    ids = ids or {}
    cells = []
    for check_id in exercise.graded_checks:
        grade_id = exercise.grade_id(check_id)
        cell = nbformat.v4.new_code_cell(grade_cell_source(exercise, check_id))
        cell.id = ids.get(grade_id, cell.id)
        cell.metadata["nbgrader"] = {
            "grade": True,
            "grade_id": grade_id,
            "locked": True,
            "points": by_id(check_id).points,
            "schema_version": 3,
            "solution": False,
        }
        cells.append(cell)
    return cells


def _is_grade_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and bool(cell.metadata.get("nbgrader", {}).get("grade", False))


def refresh(notebook: nbformat.NotebookNode, exercise: Exercise) -> nbformat.NotebookNode:
    """A copy of the notebook with its run of grade cells and its points table written from the checks
    (the notebook itself is left as it is, so `refresh(nb, e) != nb` tells whether it is stale)."""
    notebook = copy.deepcopy(notebook)
    where = [i for i, cell in enumerate(notebook.cells) if _is_grade_cell(cell)]
    if not where:
        raise ValueError(f"{exercise.notebook} has no grade cells to replace")
    first, last = where[0], where[-1]
    if where != list(range(first, last + 1)):
        raise ValueError(f"{exercise.notebook}: the grade cells should be one run of cells, with nothing between them")
    ids = {cell.metadata["nbgrader"]["grade_id"]: cell.id for cell in notebook.cells[first : last + 1] if "id" in cell}
    notebook.cells[first : last + 1] = grade_cells(exercise, ids)
    tables = [c for c in notebook.cells if c.cell_type == "markdown" and TABLE.search(c.source)]
    if len(tables) != 1:
        raise ValueError(f"{exercise.notebook} should have one points table, not {len(tables)}")
    tables[0].source = TABLE.sub(lambda _: points_table(exercise), tables[0].source)
    return notebook


CHECK_TABLE = re.compile(r"^\| id \| points \| passes when \|\n\|---\|---\|---\|\n(?:\|.*\n)*", re.MULTILINE)


def check_rows(checks: list[Check]) -> list[str]:
    return [f"| `{c.id}` | {points(c.points)} | {c.passes_when} |" for c in checks]


def check_tables() -> list[str]:
    """The README's tables of checks: the mp exercises', then the torchrun exercise's."""
    header = ["| id | points | passes when |", "|---|---|---|"]
    of_mp = {c for e in EXERCISES.values() if e.launcher == "mp" for c in e.checks}
    torchrun = next(e for e in EXERCISES.values() if e.launcher == "torchrun")
    shared = [by_id(c) for c in ALSO_UNDER_TORCHRUN]
    also = (
        f"| {', '.join(f'`{c.id}`' for c in shared)} | {', '.join(points(c.points) for c in shared)} "
        "| as above, on the workers of the job without a fault |"
    )
    own = [by_id(c) for c in torchrun.checks if c not in ALSO_UNDER_TORCHRUN]
    return [
        "\n".join([*header, *check_rows([c for c in all_checks() if c.id in of_mp])]) + "\n",
        "\n".join([*header, *check_rows(own), also]) + "\n",
    ]


def refresh_readme(text: str) -> str:
    tables = iter(check_tables())
    found = len(CHECK_TABLE.findall(text))
    if found != 2:
        raise ValueError(f"README.md should have two tables of checks, not {found}")
    return CHECK_TABLE.sub(lambda _: next(tables), text)


def refresh_samples(text: str) -> str:
    """The samples' table with its last column, the expected scores, from tests/sample_grades.py."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from sample_grades import BLANK, expected_summary

    def row(match: re.Match) -> str:
        student = match.group(1)
        folders = {p.name for p in (TESTS / "samples" / student).iterdir() if p.is_dir()}
        handed_in = [a if a in folders or student in BLANK else None for a in ASSIGNMENTS]
        scores = ", ".join(expected_summary(student, a) if a else "-" for a in handed_in)
        return f"| {student} | {match.group(2)} | {scores} |"

    return re.sub(
        r"^\| (\w+) \| (.*) \| [^|]* \|$",
        lambda m: row(m) if m.group(1) != "Student" else m[0],
        text,
        flags=re.MULTILINE,
    )


# Text files written from the checks, and how.
TEXT_FILES = {"README.md": refresh_readme, "tests/samples/README.md": refresh_samples}


def stale(root: Path = ROOT) -> list[Path]:
    """The files whose generated parts are not what the checks say."""
    found = []
    for exercise in EXERCISES.values():
        path = root / exercise.notebook
        notebook = nbformat.read(path, as_version=4)
        if refresh(notebook, exercise) != notebook:
            found.append(path)
    for name, refreshed in TEXT_FILES.items():
        text = (root / name).read_text()
        if refreshed(text) != text:
            found.append(root / name)
    return found


def write_all(root: Path = ROOT) -> list[Path]:
    """Refresh the stale files in place (notebooks in nbformat's own layout); the others are not touched."""
    written = []
    for path in stale(root):
        exercise = next((e for e in EXERCISES.values() if root / e.notebook == path), None)
        if exercise is not None:
            nbformat.write(refresh(nbformat.read(path, as_version=4), exercise), path)
        else:
            path.write_text(TEXT_FILES[str(path.relative_to(root))](path.read_text()))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.grade_cells", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook is stale")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for path in found:
            print(f"{path.relative_to(ROOT)}: stale; run `python -m tools.grade_cells`")
        return 1 if found else 0
    for path in write_all():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

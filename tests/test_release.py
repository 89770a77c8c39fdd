"""The committed release/ is what `nbgrader generate_assignment` makes from source/ today,
and it gives students no solutions and no hidden tests.

If a test here fails after you edited a source notebook or a check, regenerate and commit:
    .venv/bin/python -m tools.grade_cells
    PATH=.venv/bin:$PATH nbgrader generate_assignment <assignment> --force && git add release/<assignment>
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.exercises import ASSIGNMENTS, EXERCISES, LEFT_BY_RUNNING
from autograder.judge.checks import by_id
from autograder.wording import points
from tools import grade_cells
from tools.demo import copy_course, nbgrader

pytestmark = pytest.mark.nbgrader

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / "release"
EXERCISE_OF = {e.assignment: e for e in EXERCISES.values()}
# What a solution program or a notebook run leaves behind; none of it may be released.
NEVER_RELEASED = (*LEFT_BY_RUNNING, "gradebook.db")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    course = copy_course(tmp_path_factory.mktemp("course"))
    for assignment in ASSIGNMENTS:
        nbgrader(course, "generate_assignment", assignment, "--force")
    return course / "release"


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def comparable(path: Path) -> dict:
    """A notebook without what may change between two identical runs: cell ids, execution counts,
    notebook-level metadata other than the kernel."""
    notebook = nbformat.read(path, as_version=4)
    cells = [
        {
            "cell_type": cell.cell_type,
            "source": cell.source,
            "metadata": dict(cell.metadata),
            "outputs": cell.get("outputs", []),
        }
        for cell in notebook.cells
    ]
    return {
        "format": (notebook.nbformat, notebook.nbformat_minor),
        "kernelspec": notebook.metadata.get("kernelspec"),
        "cells": cells,
    }


def test_release_has_the_same_files(regenerated):
    for assignment in ASSIGNMENTS:
        assert (RELEASE / assignment).is_dir(), (
            f"release/{assignment} is missing: run nbgrader generate_assignment {assignment}"
        )
        assert _files(RELEASE / assignment) == _files(regenerated / assignment), (
            f"release/{assignment} has other files than a fresh generate_assignment: regenerate and commit it"
        )


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_is_current(regenerated, assignment):
    for name in sorted(_files(regenerated / assignment)):
        fresh, committed = regenerated / assignment / name, RELEASE / assignment / name
        if name.endswith(".ipynb"):
            stale = comparable(committed) != comparable(fresh)
        else:
            stale = committed.read_bytes() != fresh.read_bytes()
        assert not stale, (
            f"release/{assignment}/{name} is stale: run `nbgrader generate_assignment {assignment} --force` "
            f"and commit release/{assignment}"
        )


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_gives_away_nothing(assignment):
    folder = RELEASE / assignment
    assert not [p for p in folder.rglob("*") if p.name in NEVER_RELEASED or p.suffix == ".pt"]
    for path in folder.glob("*.ipynb"):
        text = path.read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "world_size=3"):
            assert marker not in text, f"{path.name} contains {marker!r}"


SPAWNED = sorted(a for a, e in EXERCISE_OF.items() if e.launcher == "mp")


@pytest.mark.parametrize("assignment", SPAWNED)
def test_release_stub_keeps_the_serial_code_and_stubs_each_change(assignment):
    exercise = EXERCISE_OF[assignment]
    notebook = nbformat.read(RELEASE / assignment / f"{assignment}.ipynb", as_version=4)
    [cell] = [c for c in notebook.cells if c.source.startswith(f"%%writefile {exercise.program}")]
    assert cell.metadata.nbgrader["solution"] and not cell.metadata.nbgrader["locked"]
    # Changes 1, 2a, 2b, 3, 4 and 5, the launcher and, with a test set, the evaluation: one stub each;
    # the serial code stays.
    assert cell.source.count("raise NotImplementedError()") == 7 + bool(exercise.evaluation)
    for kept in (
        "def train_one_epoch(",
        "def main(rank, world_size):",
        'if __name__ == "__main__":',
        "def free_port():",
        "optimizer.step()",
    ):
        assert kept in cell.source
    assert "mp.spawn(main" not in cell.source  # the student writes the launcher


def test_torchrun_release_gives_the_ddp_program_and_stubs_each_fault_tolerance_step():
    notebook = nbformat.read(RELEASE / "fault_tolerance" / "fault_tolerance.ipynb", as_version=4)
    [cell] = [c for c in notebook.cells if c.source.startswith("%%writefile fault_tolerance.py")]
    assert cell.metadata.nbgrader["solution"] and not cell.metadata.nbgrader["locked"]
    # Who am I, save, load, one writer, and the start: one stub each; the DDP program stays.
    assert cell.source.count("raise NotImplementedError()") == 5
    for kept in ("dist.init_process_group(", "DistributedSampler(dataset", "DDP(model", "dist.destroy_process_group()"):
        assert kept in cell.source
    for answer in ("os.replace(", "optimizer.load_state_dict(", "epoch + 1", 'os.environ["RANK"]', "mp.spawn"):
        assert answer not in cell.source


@pytest.mark.parametrize("assignment", sorted(EXERCISE_OF))
def test_one_grade_cell_per_graded_check(assignment):
    exercise = EXERCISE_OF[assignment]
    notebook = nbformat.read(ROOT / exercise.notebook, as_version=4)
    cells = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]
    graded = exercise.graded_checks
    assert [c.metadata.nbgrader["grade_id"] for c in cells] == [exercise.grade_id(c) for c in graded]
    assert "gpu_device" not in graded  # cannot apply on the CPU grading machines
    for cell, check_id in zip(cells, graded, strict=True):
        assert cell.metadata.nbgrader["points"] == by_id(check_id).points
        visible, _, hidden = cell.source.partition("### BEGIN HIDDEN TESTS")
        assert f'require("{exercise.program}", "{exercise.name}", "{check_id}")' in visible
        assert f'require("{exercise.program}", "{exercise.name}", "{check_id}", world_size=3)' in hidden


def test_grade_cells_are_generated_from_the_checks():
    found = [str(path.relative_to(ROOT)) for path in grade_cells.stale()]
    assert found == [], f"stale: {', '.join(found)}: run `python -m tools.grade_cells` and commit what it writes"


def generated_copy(root: Path) -> Path:
    """The files tools.grade_cells writes, as committed, under root."""
    for name in [*(e.notebook for e in EXERCISE_OF.values()), *grade_cells.TEXT_FILES]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    return root


def assert_found_stale_and_refreshed(root: Path, copy: Path, as_committed: bool = True) -> None:
    assert grade_cells.stale(root) == [copy]
    assert grade_cells.write_all(root) == [copy]
    assert grade_cells.stale(root) == []
    if as_committed:  # byte for byte (a grade cell written anew gets a new cell id)
        assert copy.read_bytes() == (ROOT / copy.relative_to(root)).read_bytes()


def test_a_stale_grade_cell_is_found_and_refreshed(tmp_path):
    exercise = EXERCISE_OF["linear_regression"]
    copy = generated_copy(tmp_path) / exercise.notebook
    notebook = nbformat.read(copy, as_version=4)
    graded = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]
    graded[0].metadata.nbgrader["points"] = 5
    notebook.cells.remove(graded[-1])
    nbformat.write(notebook, copy)
    assert_found_stale_and_refreshed(tmp_path, copy, as_committed=False)


def test_a_stale_points_table_is_found_and_refreshed(tmp_path):
    exercise = EXERCISE_OF["mnist_ddp"]
    copy = generated_copy(tmp_path) / exercise.notebook
    notebook = nbformat.read(copy, as_version=4)
    [table] = [c for c in notebook.cells if c.cell_type == "markdown" and "| **Total** |" in c.source]
    total = points(sum(by_id(c).points for c in exercise.graded_checks))
    table.source = table.source.replace(f"| **{total}** |", "| **99** |")
    nbformat.write(notebook, copy)
    assert_found_stale_and_refreshed(tmp_path, copy)


@pytest.mark.parametrize(
    "name, old, new",
    [
        ("README.md", "| `set_epoch` | 1 |", "| `set_epoch` | 4 |"),
        ("README.md", "| `resumed` | 3 |", "| `resumed` | 1 |"),
        ("tests/samples/README.md", "15/18 (set_epoch, checkpoint_loadable, launcher)", "16/18 (set_epoch, launcher)"),
    ],
)
def test_a_stale_table_of_checks_or_of_sample_scores_is_found_and_refreshed(tmp_path, name, old, new):
    copy = generated_copy(tmp_path) / name
    text = copy.read_text()
    assert text.count(old) == 1
    copy.write_text(text.replace(old, new))
    assert_found_stale_and_refreshed(tmp_path, copy)

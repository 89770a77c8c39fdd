"""The students' package holds the released assignments and the grader, and not
one line of a solution or a hidden test."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import nbformat

from autograder.__main__ import main
from autograder.exercises import ASSIGNMENTS

ROOT = Path(__file__).resolve().parents[1]
REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)
SHORT = 20  # shorter lines ("return loss", "import os") are anyone's


def readable(name: str, data: bytes) -> str:
    """A file's text; a notebook's cells, not its JSON (where quotes are escaped)."""
    if name.endswith(".ipynb"):
        return "\n".join(cell.source for cell in nbformat.reads(data.decode(), as_version=4).cells)
    return data.decode(errors="replace")


def released_text() -> str:
    return "\n".join(readable(p.name, p.read_bytes()) for p in (ROOT / "release").rglob("*") if p.is_file())


def regions() -> tuple[list[list[str]], set[str]]:
    """The solutions (each a list of lines: source notebooks' solution regions and
    solutions/), and the lines of the hidden tests."""
    solutions, hidden = [], set()
    for notebook in (ROOT / "source").glob("*/*.ipynb"):
        for cell in nbformat.read(notebook, as_version=4).cells:
            for kind, region in REGION.findall(cell.source):
                if kind == "SOLUTION":
                    solutions.append(region.splitlines())
                else:
                    hidden |= {line.strip() for line in region.splitlines() if len(line.strip()) >= SHORT}
    solutions += [program.read_text().splitlines() for program in (ROOT / "solutions").glob("*.py")]
    return solutions, hidden


def secret_passages() -> set[str]:
    """Every run of three lines of a solution that the release does not show:
    a single line may be an idiom any hint quotes (`sampler.set_epoch(epoch)`),
    three in a row are the answer."""
    shown = {line.strip() for line in released_text().splitlines()}
    solutions, _ = regions()
    passages = set()
    for lines in solutions:
        lines = [line.strip() for line in lines if line.strip()]
        for start in range(len(lines) - 2):
            window = lines[start : start + 3]
            if not all(line in shown for line in window):
                passages.add("\n".join(window))
    return passages


def test_the_bundle_holds_the_release_and_the_grader_and_no_answer(tmp_path):
    bundle = tmp_path / "ddp-course-student.zip"
    assert main(["student-bundle", "-o", str(bundle)]) == 0
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        text = "\n".join(readable(name, archive.read(name)) for name in names)
    lines = "\n".join(line.strip() for line in text.splitlines())
    top = {name.split("/")[1] for name in names}
    assert top == {*ASSIGNMENTS, "autograder", "pyproject.toml", "README.md"}
    assert "ddp-course-student/autograder/grading.py" in names
    assert "ddp-course-student/linear_regression/linear_regression.ipynb" in names
    passages, hidden = secret_passages(), regions()[1]
    assert len(passages) > 100 and len(hidden) > 30  # the test has something to look for
    assert not sorted(p for p in passages if p in lines)[:3]
    assert not sorted(h for h in hidden if h in lines)[:3]

"""What the bundle's run_autograder runs, for every upload:

    python -m autograder.gradescope.run EXERCISE

Gradescope runs it as root in /autograder, with the upload in
/autograder/submission (the root comes from DDP_GRADESCOPE_ROOT, for tests).
The student's ranks run in the grader's sandbox, each as a user of its own
with no rights, on a read-only file system: they cannot write the results.
This process writes /autograder/results/results.json at the end, whatever
happened, over anything that was there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from .. import submission as submissions
from ..errors import CannotGrade
from ..exercises import EXERCISES, Exercise
from ..launch.sandbox import why_unavailable
from ..reports import gradescope
from ..schema.run import DEFAULT_WORLD_SIZE, HIDDEN_WORLD_SIZE, RunOptions

ROOT_VARIABLE = "DDP_GRADESCOPE_ROOT"
GRADED_SUFFIXES = (".py", ".ipynb")
SKIPPED_PARTS = ("__pycache__", ".ipynb_checkpoints", "__MACOSX")


def gradescope_root() -> Path:
    return Path(os.environ.get(ROOT_VARIABLE, "/autograder"))


def uploaded_programs(folder: Path) -> list[Path]:
    """The upload's .py and .ipynb files, in name order, without editors' and archivers' leftovers."""
    if not folder.is_dir():
        return []
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and path.suffix in GRADED_SUFFIXES
        and not path.name.startswith(".")
        and not any(part in SKIPPED_PARTS for part in path.relative_to(folder).parts)
    )


def _defines_main(path: Path) -> bool:
    try:
        return submissions.preflight(submissions.load(path)) is None
    except CannotGrade:
        return False


def choose(files: list[Path], exercise: Exercise, folder: Path) -> tuple[Path, list[str]]:
    """The file to grade, and a note saying which one it is: the exercise's
    own program or notebook by name, else the first that defines main, else the first."""
    named = [f for f in files if f.name in (exercise.program, f"{exercise.assignment}.ipynb")]
    chosen = (named or [f for f in files if _defines_main(f)] or files)[0]
    shown = lambda path: f"`{path.relative_to(folder)}`"  # noqa: E731
    notes = [f"Graded {shown(chosen)}."]
    others = [shown(f) for f in files if f != chosen]
    if others:
        notes.append(
            f"Also in your upload, not graded: {', '.join(others)}. The grader takes the file named "
            f"`{exercise.program}` or `{exercise.assignment}.ipynb`, else the first one that defines "
            "main(rank, world_size)."
        )
    return chosen, notes


def grade_upload(folder: Path, exercise: Exercise) -> dict:
    """The results for the upload in `folder`."""
    from ..grading import grade_at

    started = time.monotonic()
    files = uploaded_programs(folder)
    if not files:
        return gradescope.not_graded(
            exercise,
            "Your upload holds no .py or .ipynb file, so there was nothing to grade.",
            f"Upload your program ({exercise.program}) or your notebook ({exercise.assignment}.ipynb).",
            time.monotonic() - started,
        )
    unavailable = why_unavailable()
    if unavailable is not None:  # the machine's problem, never the student's
        print(f"The sandbox cannot run here: {unavailable}.")
        return gradescope.grader_failed(time.monotonic() - started)
    chosen, notes = choose(files, exercise, folder)
    try:
        reports = grade_at(
            chosen, exercise.name, (DEFAULT_WORLD_SIZE, HIDDEN_WORLD_SIZE), RunOptions(sandbox="required")
        )
    except CannotGrade as error:
        return gradescope.not_graded(exercise, error.message, error.hint, time.monotonic() - started)
    return gradescope.results(exercise, reports, notes, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.gradescope.run")
    parser.add_argument("exercise", choices=sorted(EXERCISES))
    args = parser.parse_args(argv)
    root, started = gradescope_root(), time.monotonic()
    try:
        results = grade_upload(root / "submission", EXERCISES[args.exercise])
        wrong = gradescope.problems(results)
        if wrong:
            raise ValueError(f"the results break Gradescope's format: {'; '.join(wrong)}")
    except BaseException:  # a results file, always: this one says the grader failed
        traceback.print_exc()  # to /autograder/results/stdout, which the instructor sees
        results = gradescope.grader_failed(time.monotonic() - started)
    gradescope.write(results, root / "results" / "results.json")
    print(f"Score {results['score']:g}; wrote {root / 'results' / 'results.json'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

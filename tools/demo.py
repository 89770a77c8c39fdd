"""`python -m tools.demo [--keep]`: grade the bundled sample students with the real nbgrader pipeline.

In a temporary copy of the course (nbgrader_config.py and source/) it runs the
commands an instructor runs:

    nbgrader db student add <student> ...      for each sample student
    nbgrader db assignment add <assignment>    ddp_intro, linear_regression, mnist_ddp
    nbgrader generate_assignment <assignment>
    (the students' notebooks go into submitted/<student>/<assignment>/)
    python -m autograder autograde --all      nbgrader's autograde of every assignment, students in parallel
    nbgrader generate_feedback <assignment>

then prints the gradebook's scores (student x assignment) and, for every point
lost, the grade cell and the autograder's explanation. (How the class command
compares with serial nbgrader: benchmarks/class_autograde.py.)

A sample student is a folder tests/samples/<student>/<assignment>/ of answers.
Their notebook is the released notebook with each answer put in its cell: for
a `%%writefile NAME.py` cell, NAME.answers.py holds one block per stub of the
released program, in order; a file named <grade_id>.py replaces the solution
cell with that grade id; added_cell.py is a cell of the student's own, put
just before the first grade cell. A cell without an answer keeps its stub, so
a student with no answers submits the release untouched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.exercises import ASSIGNMENTS, LEFT_BY_RUNNING
from autograder.nbgrader_ext.class_grading import nbgrader_env
from autograder.nbgrader_ext.gradebook import scores, scores_table
from autograder.wording import points

ROOT = Path(__file__).resolve().parents[1]  # the course directory (a checkout of the repository)
SAMPLES = ROOT / "tests" / "samples"
STUDENTS = {  # id: (first name, last name, what the sample shows)
    "ada": ("Ada", "Sample", "all right"),
    "brook": ("Brook", "Sample", "classic mistakes"),
    "cy": ("Cy", "Sample", "blank release"),
    "eve": ("Eve", "Sample", "a crash: partial credit"),
}


class CommandFailed(RuntimeError):
    pass


def copy_course(dest: Path, root: Path = ROOT) -> Path:
    """A fresh course directory: the nbgrader config and the source notebooks."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / "nbgrader_config.py", dest / "nbgrader_config.py")
    shutil.copytree(root / "source", dest / "source", ignore=shutil.ignore_patterns(*LEFT_BY_RUNNING))
    return dest


def nbgrader(course: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run one nbgrader command in the course directory; raise CommandFailed with its log if it fails."""
    command = [sys.executable, "-m", "nbgrader", *args]
    done = subprocess.run(
        command,
        cwd=course,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        log = (done.stdout + done.stderr).strip().splitlines()
        raise CommandFailed(
            f"`nbgrader {' '.join(args)}` exited with status {done.returncode}:\n" + "\n".join(log[-40:])
        )
    return done


STUB = re.compile(r"[ \t]*# YOUR CODE HERE\n[ \t]*raise NotImplementedError\(\)\n?")
ANSWER_HEADING = re.compile(r"^# answer \d+\n", re.MULTILINE)


def fill_stubs(program: str, answers: str) -> str:
    """The released program with its stubs replaced, in order, by the blocks
    of an answers file (each block under a `# answer N` line, indented as it
    goes in the program): what a student who edited the stubs hands in."""
    blocks = ANSWER_HEADING.split(answers)[1:]
    stubs = STUB.findall(program)
    if len(blocks) != len(stubs):
        raise ValueError(f"{len(blocks)} answers for {len(stubs)} stubs")
    filled = iter(blocks)
    return STUB.sub(lambda _: next(filled), program)


ADDED_CELL = "added_cell.py"


def fill_notebook(notebook_path: Path, answers: Path | None):
    """The released notebook with a student's answers put in (see the module docstring)."""
    import nbformat

    notebook = nbformat.read(notebook_path, as_version=4)
    if answers is None or not answers.is_dir():
        return notebook
    for cell in notebook.cells:
        info = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not info.get("solution"):
            continue
        first, _, stub = cell.source.partition("\n")
        if first.startswith("%%writefile"):
            program = answers / Path(first.split()[-1]).with_suffix(".answers.py")
            if program.is_file():
                cell.source = first + "\n" + fill_stubs(stub, program.read_text()).rstrip("\n")
                continue
        answer = answers / f"{info.get('grade_id')}.py"
        if answer.is_file():
            cell.source = answer.read_text().rstrip("\n")
    added = answers / ADDED_CELL
    if added.is_file():  # a cell of the student's own, just before the first grade cell
        first_grade = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade"))
        notebook.cells.insert(first_grade, nbformat.v4.new_code_cell(added.read_text().rstrip("\n")))
    return notebook


def submit(course: Path, student: str, assignment: str, answers: Path | None) -> None:
    """What a student hands in: their copy of the released folder, notebooks filled in."""
    import nbformat

    release, target = course / "release" / assignment, course / "submitted" / student / assignment
    shutil.copytree(release, target, dirs_exist_ok=True)
    for notebook in release.glob("*.ipynb"):
        nbformat.write(fill_notebook(notebook, answers), target / notebook.name)


def lost_points(course: Path, student: str, assignment: str) -> list[tuple[str, float, str]]:
    """(grade cell, points lost, its error without the hint) for each grade cell that lost points."""
    import nbformat
    from nbgrader.api import Gradebook

    lost = []
    with Gradebook("sqlite:///" + str(course / "gradebook.db"), "ddp-course") as gb:
        submission = gb.find_submission(assignment, student)
        for notebook in submission.notebooks:
            path = course / "autograded" / student / assignment / f"{notebook.name}.ipynb"
            errors = {}
            if path.is_file():
                for cell in nbformat.read(path, as_version=4).cells:
                    for output in cell.get("outputs", []):
                        if output.output_type == "error":
                            lines = str(output.get("evalue") or "").strip().splitlines()
                            why = " ".join(line for line in lines if not line.startswith("Hint:"))
                            why = re.sub(r"^.*?\(checked with \d+ ranks?\):?\s*", "", why)  # the cell names the check
                            errors[cell.metadata.get("nbgrader", {}).get("grade_id")] = why or output.get("ename", "")
            for grade in notebook.grades:
                if grade.score is not None and grade.score < grade.max_score:
                    lost.append((grade.name, grade.max_score - grade.score, errors.get(grade.name, "")))
    return lost


def class_autograde(course: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m autograder autograde ...` in the course; raise CommandFailed with its output if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "autograder", *args],
        cwd=course,
        env=nbgrader_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise CommandFailed(
            f"`python -m autograder {' '.join(args)}` exited with status {done.returncode}:\n"
            + "\n".join((done.stdout + done.stderr).strip().splitlines()[-40:])
        )
    return done


def run_demo(keep: bool = False) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.padding import Padding

    console = Console(highlight=False)
    if not (ROOT / "nbgrader_config.py").is_file() or not SAMPLES.is_dir():
        console.print(
            f"[bold red]The demo needs the course repository[/] (nbgrader_config.py, source/, tests/samples/); "
            f"not found under {ROOT}."
        )
        return 1
    course = Path(tempfile.mkdtemp(prefix="ddp-course-demo-"))
    started = time.monotonic()

    def step(text: str, *args: str, where: Path = course, command=nbgrader) -> float:
        t0 = time.monotonic()
        with console.status(text):
            command(where, *args)
        seconds = time.monotonic() - t0
        console.print(f"  {text} [dim]({seconds:.0f} s)[/]")
        return seconds

    try:
        console.print(f"[bold]ddp-course demo[/]: grading {len(STUDENTS)} sample students with nbgrader in {course}")
        copy_course(course)
        names = "".join(f"{student},{first},{last}\n" for student, (first, last, _) in STUDENTS.items())
        (course / "students.csv").write_text("id,first_name,last_name\n" + names)
        step(
            f"nbgrader db student import students.csv ({', '.join(STUDENTS)})",
            "db",
            "student",
            "import",
            "students.csv",
        )
        for assignment in ASSIGNMENTS:  # which also adds it to the gradebook, in this order
            step(f"nbgrader generate_assignment {assignment}", "generate_assignment", assignment, "--force")
        for student in STUDENTS:
            for assignment in ASSIGNMENTS:
                submit(course, student, assignment, SAMPLES / student / assignment)
        console.print(
            f"  {len(STUDENTS) * len(ASSIGNMENTS)} notebooks put into submitted/ from {SAMPLES.relative_to(ROOT)}/"
        )
        step(
            "python -m autograder autograde --all (every assignment, in one call)",
            "autograde",
            "--all",
            command=class_autograde,
        )
        for assignment in ASSIGNMENTS:
            step(f"nbgrader generate_feedback {assignment}", "generate_feedback", assignment)

        found = scores(course, STUDENTS, ASSIGNMENTS)
        console.print()
        console.print(scores_table(course, {s: what for s, (_, _, what) in STUDENTS.items()}, list(ASSIGNMENTS)))

        blank = [s for s in STUDENTS if all(found[s, a][0] == 0 for a in ASSIGNMENTS)]
        console.print("\n[bold]Where the points went[/] (each student's feedback HTML explains the same):")
        for student in STUDENTS:
            if student in blank:
                continue
            for assignment in ASSIGNMENTS:
                for cell, lost, why in lost_points(course, student, assignment):
                    console.print(f"  {student} · {assignment} · {cell} [red](-{points(lost)})[/]")
                    console.print(Padding(escape(why), (0, 0, 0, 6)), style="dim")
        if blank:
            console.print(
                f"{', '.join(blank)}: 0 points everywhere (every grade cell failed: the stubs raise "
                "NotImplementedError)."
            )
        console.print(f"\nDone in {time.monotonic() - started:.0f} s.")
        if keep:
            console.print(
                f"Course folder kept: {course}\n  feedback: {course / 'feedback'}/<student>/<assignment>/*.html"
            )
        return 0
    except (CommandFailed, subprocess.TimeoutExpired) as error:
        console.print(f"[bold red]The demo failed:[/] {escape(str(error))}")
        if keep:
            console.print(f"Course folder kept: {course}")
        return 1
    finally:
        if not keep:
            shutil.rmtree(course, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary course folder and print where it is")
    return run_demo(keep=parser.parse_args(argv).keep)


if __name__ == "__main__":
    sys.exit(main())

"""What a class's autograde costs a submission, against the work that cannot be skipped, per
assignment, in one run.

(a) the floor: a "Run All" of the solved notebook (`jupyter nbconvert --execute`, check cells
    included), and the bare run of the reference program (its own launcher: 2 CPU ranks; the
    torchrun one under `torchrun --standalone --nproc-per-node 2`);
(b) `python -m autograder autograde ASSIGNMENT --jobs N`, for each N, on --students correct
    submissions (the solved notebook), divided by the number of students.

The figure is (b) / Run All. --profile also splits one submission's time (class_autograde.py).

  .venv/bin/python benchmarks/autograde_floor.py [--students 24] [--jobs 1 --jobs 2] [--assignment NAME] [--profile]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from class_autograde import profile, timed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.datasets import provide_mnist  # noqa: E402
from autograder.exercises import ASSIGNMENTS  # noqa: E402
from tools.demo import copy_course, nbgrader, nbgrader_env  # noqa: E402

REFERENCE = {  # the bare run of each assignment's reference program
    "linear_regression": [sys.executable, "solutions/linear_regression_ddp.py"],
    "mnist_ddp": [sys.executable, "solutions/mnist_ddp.py"],
    "fault_tolerance": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    + ["solutions/fault_tolerance.py"],
}


def wall(command: list[str], cwd: Path) -> float:
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=nbgrader_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started


def run_all(assignment: str, folder: Path) -> float:
    """A student's Run All of the solved notebook, in a fresh copy of its folder."""
    copy = Path(shutil.copytree(ROOT / "source" / assignment, folder / f"run-all-{assignment}"))
    command = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace"]
    return wall([*command, "--ExecutePreprocessor.timeout=600", f"{assignment}.ipynb"], copy)


def bare_run(assignment: str, folder: Path) -> float | None:
    if assignment not in REFERENCE:
        return None
    workdir = folder / f"bare-{assignment}"
    shutil.copytree(ROOT / "solutions", workdir / "solutions")
    provide_mnist(workdir / "data")  # offline, as the notebook does before its runs
    return wall(REFERENCE[assignment], workdir)


def prepared_class(assignment: str, students: int, folder: Path) -> Path:
    course = copy_course(folder / f"course-{assignment}")
    nbgrader(course, "generate_assignment", assignment, "--force")
    for n in range(students):
        shutil.copytree(ROOT / "source" / assignment, course / "submitted" / f"student{n:02d}" / assignment)
    return course


def per_submission(course: Path, assignment: str, jobs: int, students: int, folder: Path) -> float:
    copy = Path(shutil.copytree(course, folder / f"{course.name}-jobs{jobs}"))
    seconds, _ = timed([sys.executable, "-m", "autograder", "autograde", assignment, "--jobs", str(jobs)], copy)
    return seconds / students


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=24)
    parser.add_argument("--jobs", type=int, action="append", help="default: 1 and 2")
    parser.add_argument("--assignment", choices=ASSIGNMENTS, action="append", help="default: all")
    parser.add_argument("--profile", action="store_true", help="split one submission's time, per assignment")
    args = parser.parse_args()
    jobs = args.jobs or [1, 2]
    folder = Path(tempfile.mkdtemp(prefix="ddp-floor-"))
    rows = []
    try:
        for assignment in args.assignment or ASSIGNMENTS:
            floor, bare = run_all(assignment, folder), bare_run(assignment, folder)
            course = prepared_class(assignment, args.students, folder)
            costs = {n: per_submission(course, assignment, n, args.students, folder) for n in jobs}
            rows.append((assignment, floor, bare, costs))
            print(f"{assignment}: Run All {floor:.1f} s, bare {bare}, a submission {costs}", flush=True)
            if args.profile:
                profile(course, assignment)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\n{args.students} correct submissions an assignment; seconds, and (b) / Run All:")
    heads = " | ".join(f"autograde --jobs {n}, a submission" for n in jobs)
    print(f"| assignment | Run All | bare run (2 ranks) | {heads} |")
    print("|---|---|---|" + "---|" * len(jobs))
    for assignment, floor, bare, costs in rows:
        cells = " | ".join(f"{costs[n]:.1f} s (**{costs[n] / floor:.2f}**)" for n in jobs)
        print(f"| {assignment} | {floor:.1f} s | {'-' if bare is None else f'{bare:.1f} s'} | {cells} |")


if __name__ == "__main__":
    main()

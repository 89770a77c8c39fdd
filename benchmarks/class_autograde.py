"""A class through nbgrader: `python -m autograder autograde --jobs N` over serial
`nbgrader autograde`, on the same submissions, in one run; and where one
submission's time goes.

The class is the sample students of linear_regression (ada, brook, cy, eve)
repeated to --students submissions. Both runs start from the same prepared
course, copied. The figure is the ratio of the wall times (serial / parallel).

  .venv/bin/python benchmarks/class_autograde.py [--students 24] [--jobs 2] [--profile] [--baseline REV]

--baseline REV also times serial nbgrader with the grader of git revision REV
(checked out in a worktree under build/, which the ranks' sandbox can see),
in the same run: what a class took before the cuts this command made.

--profile grades one submission with nbgrader's log time-stamped and splits
its time: nbgrader's start, the kernel's run of the notebook, the gradings
out of the kernel, and the rest.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.demo import SAMPLES, copy_course, nbgrader, nbgrader_env, submit  # noqa: E402

ASSIGNMENT = "linear_regression"
SAMPLE_STUDENTS = ("ada", "brook", "cy", "eve")


def prepare(folder: Path, students: int) -> Path:
    course = copy_course(folder / "course")
    nbgrader(course, "db", "assignment", "add", ASSIGNMENT)
    nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    for n in range(students):
        sample = SAMPLE_STUDENTS[n % len(SAMPLE_STUDENTS)]
        submit(course, f"{sample}{n:02d}", ASSIGNMENT, SAMPLES / sample / ASSIGNMENT)
    return course


def timed(command: list[str], course: Path, grader: Path = ROOT) -> tuple[float, str]:
    """Wall time and output of `command` in `course`, with the autograder package of `grader` first."""
    env = nbgrader_env() | {"PYTHONPATH": str(grader)}
    started = time.monotonic()
    done = subprocess.run(command, cwd=course, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.monotonic() - started, done.stdout + done.stderr


STAMP = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3}) (.*)$")
GRADED = re.compile(r"out of the kernel, in ([\d.]+) s")


def profile(course: Path, assignment: str = ASSIGNMENT) -> None:
    """Split one submission's time by nbgrader's own (time-stamped) log lines."""
    student = next(p.parent.name for p in sorted((course / "submitted").glob(f"*/{assignment}")))
    command = [sys.executable, "-m", "nbgrader", "autograde", assignment, "--student", student, "--force"]
    command += ["--Application.log_format=%(asctime)s.%(msecs)03d %(message)s", "--Application.log_datefmt=%H:%M:%S"]
    wall_start = datetime.now()
    seconds, log = timed(command, course)
    stamps = []
    for line in log.splitlines():
        if m := STAMP.match(line):
            at = datetime.combine(wall_start.date(), datetime.strptime(m.group(1), "%H:%M:%S.%f").time())
            stamps.append(((at - wall_start).total_seconds(), m.group(2)))
    gradings = [(t, float(m.group(1))) for t, text in stamps if (m := GRADED.search(text))]
    autograding = next(t for t, text in stamps if text.startswith("Autograding"))
    print(f"one submission ({student}): {seconds:.1f} s")
    print(f"  nbgrader's start (imports, config, the sanitizing pass): {autograding:.1f} s")
    if not gradings:  # a quiz: no grading out of the kernel
        print(f"  the kernel's run of the notebook, saving grades, writing the notebook: {seconds - autograding:.1f} s")
        return
    kernel_done = gradings[0][0] - gradings[0][1]  # the first grading starts once the kernel is done
    out_of_kernel = sum(d for _, d in gradings)
    print(f"  the kernel's run of the notebook (its start and every cell): {kernel_done - autograding:.1f} s")
    print(f"  the gradings out of the kernel (the CLI, once per world size): {out_of_kernel:.1f} s")
    print(f"  the rest (saving grades, writing the notebook, exit): {seconds - kernel_done - out_of_kernel:.1f} s")


def serial_nbgrader(course: Path, copy: Path, grader: Path = ROOT) -> float:
    return timed(
        [sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT], Path(shutil.copytree(course, copy)), grader
    )[0]


def baseline_seconds(course: Path, folder: Path, revision: str) -> float:
    """Serial nbgrader with the grader as it was at `revision`, its own config and notebooks included."""
    worktree = ROOT / "build" / f"baseline-{revision}"
    subprocess.run(["git", "worktree", "add", "--force", "--detach", str(worktree), revision], cwd=ROOT, check=True)
    try:
        baseline_course = copy_course(folder / "baseline-course", root=worktree)
        shutil.copytree(course / "submitted", baseline_course / "submitted")
        shutil.copy2(course / "gradebook.db", baseline_course / "gradebook.db")
        subprocess.run(
            [sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force"],
            cwd=baseline_course,
            env=nbgrader_env() | {"PYTHONPATH": str(worktree)},
            check=True,
            capture_output=True,
        )
        return serial_nbgrader(baseline_course, folder / "baseline", worktree)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--baseline", metavar="REV", help="also time serial nbgrader with the grader at REV")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddp-class-bench-") as folder:
        course = prepare(Path(folder), args.students)
        if args.profile:
            profile(Path(shutil.copytree(course, Path(folder) / "profiled")))
        before = baseline_seconds(course, Path(folder), args.baseline) if args.baseline else None
        serial = serial_nbgrader(course, Path(folder) / "serial")
        command = [sys.executable, "-m", "autograder", "autograde", ASSIGNMENT, "--jobs", str(args.jobs)]
        parallel, output = timed(command, course)
        each = sorted(int(m) for m in re.findall(r"graded, (\d+) s", output))
        n = args.students
        print(f"{n} submissions of {ASSIGNMENT}:")
        if before is not None:
            print(f"  serial nbgrader, grader at {args.baseline}: {before:.0f} s ({before / n:.1f} s each)")
        print(f"  serial nbgrader, this grader: {serial:.0f} s ({serial / n:.1f} s each)")
        print(f"  python -m autograder autograde --jobs {args.jobs}: {parallel:.0f} s ({parallel / n:.1f} s each)")
        if each:
            median = each[len(each) // 2]
            print(f"    one student in a job: median {median} s, first {each[-1]} s (the job's warm helpers starting)")
        if before is not None:
            print(f"  ratio over serial nbgrader at {args.baseline}: {before / parallel:.2f}")
        print(f"  ratio over serial nbgrader with this grader: {serial / parallel:.2f}")


if __name__ == "__main__":
    main()

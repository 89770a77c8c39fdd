"""`python -m autograder autograde ASSIGNMENT --slurm`: the class graded as one Slurm job array.

Each array task is one student's `nbgrader autograde ASSIGNMENT --student ID`,
the same command that `--jobs N` runs on one machine, into a gradebook of its
own. The submissions live on the shared course folder; so does the run's
folder, which holds all a task reads and writes besides nbgrader's autograded/:

    .autograde-slurm/<assignment>-<stamp>/
        grade.sbatch           the script that was submitted, for the instructor to read
        students.txt           line i + 1: the student of array task i
        gradebook-base.db      the course's gradebook at submission; each task starts from a copy
        gradebooks/<ID>.db     what that student's nbgrader wrote (each task writes only its own)
        status/<ID>            nbgrader's exit status and seconds, once it has ended
        logs/<i>.log           array task i's output
        run.json               the job id, the students, their fingerprints, and whether merged

Once the job has left the queue, the gradebooks are merged into the course's
gradebook.db in one transaction, as after a local run. A task that Slurm
killed (cancelled, or past --time) has no status: it is reported, and its
student's grades stay as they were.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import CannotGrade
from .class_grading import (
    ClassRun,
    Outcome,
    autograde_command,
    fingerprint,
    log_tail,
    plan,
    record_grades,
)
from .class_progress import SILENT, Progress

RUNS_FOLDER = ".autograde-slurm"
POLL_S = 2.0


@dataclass
class SlurmOptions:
    """What each array task asks Slurm for."""

    partition: str | None = None
    gpus_per_job: int = 0  # 0: the ranks run on the CPU, with gloo
    cpus_per_job: int = 2
    time: str = "00:30:00"  # Slurm's --time: past it, Slurm kills the task


@dataclass
class SlurmRun:
    """One submitted job array, as its run.json keeps it."""

    folder: Path
    assignment: str
    job_id: str
    students: list[str]
    fingerprints: dict[str, str]
    unchanged: list[str] = field(default_factory=list)
    submitted: float = 0.0
    merged: bool = False

    def save(self) -> None:
        from .._files import write_text

        data = asdict(self) | {"folder": None}
        write_text(self.folder / "run.json", json.dumps(data, indent=1))

    @classmethod
    def load(cls, folder: Path) -> SlurmRun:
        return cls(**json.loads((folder / "run.json").read_text()) | {"folder": folder})

    def gradebook(self, student: str) -> Path:
        return self.folder / "gradebooks" / f"{student}.db"

    def ended(self, index: int, left_queue: bool) -> Outcome | None:
        """How array task `index` ended: from its status file, or killed if it left the queue without one."""
        student = self.students[index]
        log_file = self.folder / "logs" / f"{index}.log"
        log = log_file.read_text(errors="replace") if log_file.is_file() else ""
        try:
            code, seconds = (self.folder / "status" / student).read_text().split()
        except (OSError, ValueError):
            if not left_queue:
                return None
            return Outcome(student, None, 0.0, log_tail(log), killed_by="killed by Slurm (cancelled, or past --time)")
        if int(code) > 128:  # nbgrader died of a signal: Slurm's, at --time or scancel
            return Outcome(
                student, None, float(seconds), log_tail(log), killed_by=f"killed by signal {int(code) - 128}"
            )
        return Outcome(student, int(code), float(seconds), log_tail(log) if int(code) else "")


def batch_script(course: Path, run: SlurmRun, options: SlurmOptions) -> str:
    """The sbatch script: one array task per student, each into its own gradebook."""
    folder = run.folder
    directives = {
        "job-name": f"autograde-{run.assignment}",
        "array": f"0-{len(run.students) - 1}",
        "cpus-per-task": str(options.cpus_per_job),
        "time": options.time,
        "output": f"{folder}/logs/%a.log",
    }
    if options.partition:
        directives["partition"] = options.partition
    if options.gpus_per_job:
        directives["gres"] = f"gpu:{options.gpus_per_job}"  # Slurm sets CUDA_VISIBLE_DEVICES to them
    gradebook = '"$run/gradebooks/$student.db"'
    # The shell fills in the student and their gradebook; every other word is quoted as it is.
    command = autograde_command(run.assignment, '"$student"', gradebook)
    nbgrader = " ".join(word if "$" in word else shlex.quote(word) for word in command)
    lines = [
        "#!/bin/bash",
        f"# nbgrader's autograde of {run.assignment} for {len(run.students)} students, one array task each.",
        "# Written by `python -m autograder autograde ... --slurm`. Each task grades one student into a",
        "# gradebook of its own; `python -m autograder autograde ... --merge` merges them into gradebook.db.",
        *(f"#SBATCH --{name}={value}" for name, value in directives.items()),
        "",
        f"run={shlex.quote(str(folder))}",
        'student=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$run/students.txt")',
        f"cd {shlex.quote(str(course))} || exit",
        f'cp "$run/gradebook-base.db" {gradebook} || exit',
        f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH  # nbgrader runs alembic",
    ]
    if not options.gpus_per_job:
        lines.append("export CUDA_VISIBLE_DEVICES=  # no GPUs: the ranks run on the CPU, with gloo")
    lines += [nbgrader, 'echo "$? $SECONDS" > "$run/status/$student"', ""]
    return "\n".join(lines)


def _slurm_command(*command: str) -> subprocess.CompletedProcess:
    if shutil.which(command[0]) is None:
        raise CannotGrade(
            f"--slurm needs Slurm's {command[0]}, and there is none on PATH here.",
            "Run this on the cluster's login node, or grade on this machine without --slurm (--jobs N).",
        )
    return subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)


def submit(
    course: Path,
    assignment: str,
    students: list[str] | None = None,
    force: bool = False,
    options: SlurmOptions | None = None,
) -> SlurmRun | None:
    """Write the run's folder and submit its job array; None when every submission is unchanged."""
    options = options or SlurmOptions()
    course = course.resolve()
    _slurm_command("sbatch", "--version")  # before anything is written
    chosen, unchanged = plan(course, assignment, students, force)
    if not chosen:
        return None
    runs = course / RUNS_FOLDER
    runs.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{assignment}-{time.strftime('%Y%m%d-%H%M%S')}-", dir=runs))
    for part in ("gradebooks", "status", "logs"):
        (folder / part).mkdir()
    shutil.copyfile(course / "gradebook.db", folder / "gradebook-base.db")
    (folder / "students.txt").write_text("".join(f"{student}\n" for student in chosen))
    run = SlurmRun(folder, assignment, "", list(chosen), {s: fingerprint(f) for s, f in chosen.items()}, unchanged)
    script = folder / "grade.sbatch"
    script.write_text(batch_script(course, run, options))
    done = _slurm_command("sbatch", "--parsable", str(script))
    if done.returncode != 0:
        shutil.rmtree(folder)
        raise CannotGrade(
            f"Slurm refused the job: {done.stderr.strip() or done.stdout.strip()}",
            "Check --partition, --time, --cpus-per-job and --gpus-per-job against what this cluster offers.",
        )
    run.job_id = done.stdout.strip().split(";")[0]  # "ID" or "ID;cluster"
    run.submitted = time.time()
    run.save()
    return run


def _queued(job_id: str) -> dict[int, str]:
    """array task index -> its state, for the tasks still in Slurm's queue."""
    done = _slurm_command("squeue", "--noheader", "--array", f"--jobs={job_id}", "--format=%K %T")
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return {}  # the job ended long enough ago that Slurm forgot it
        raise CannotGrade(
            f"squeue could not say how job {job_id} stands: {done.stderr.strip()}",
            "When Slurm answers again, merge what was graded with `python -m autograder autograde ... --merge`.",
        )
    queued = {}
    for line in done.stdout.splitlines():
        index, _, state = line.strip().partition(" ")
        if index.isdigit():
            queued[int(index)] = state
    return queued


def wait(run: SlurmRun, progress: Progress = SILENT, poll_s: float = POLL_S) -> list[Outcome]:
    """Until every array task has ended, telling `progress` as they start and end."""
    waiting = set(range(len(run.students)))
    outcomes: dict[int, Outcome] = {}
    running: set[str] = set()
    progress.begin(len(waiting), run.unchanged)
    while waiting:
        queued = _queued(run.job_id)
        now_running = {run.students[i] for i in waiting if queued.get(i) == "RUNNING"}
        if now_running - running:
            progress.started(now_running)
        running = now_running
        for index in sorted(waiting):
            outcome = run.ended(index, left_queue=index not in queued)
            if outcome is not None:
                waiting.discard(index)
                running.discard(outcome.student)
                outcomes[index] = outcome
                progress.finished(outcome, set(running))
        if waiting:
            time.sleep(poll_s)
    return [outcomes[i] for i in sorted(outcomes)]


def collect(course: Path, run: SlurmRun, progress: Progress = SILENT, poll_s: float = POLL_S) -> ClassRun:
    """Wait for the job, then merge its gradebooks into the course's, in one transaction."""
    started = time.monotonic()
    outcomes = wait(run, progress, poll_s)
    gradebooks = {student: run.gradebook(student) for student in run.students}
    record_grades(course.resolve(), run.assignment, outcomes, gradebooks, run.fingerprints)
    run.merged = True
    run.save()
    return ClassRun(run.assignment, outcomes, run.unchanged, time.monotonic() - started)


def latest_unmerged(course: Path, assignment: str) -> SlurmRun:
    """The last job array of `assignment` submitted with --no-wait (or left) and not merged yet."""
    folders = (course / RUNS_FOLDER).glob(f"{assignment}-*/run.json")
    runs = [SlurmRun.load(path.parent) for path in folders]
    waiting = sorted((r for r in runs if not r.merged and r.assignment == assignment), key=lambda r: r.submitted)
    if not waiting:
        raise CannotGrade(
            f"No Slurm run of {assignment!r} is waiting to be merged in {course / RUNS_FOLDER}.",
            f"Submit one first: python -m autograder autograde {assignment} --slurm",
        )
    return waiting[-1]

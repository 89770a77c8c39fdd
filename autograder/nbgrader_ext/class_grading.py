"""`python -m autograder autograde ASSIGNMENT`: nbgrader's autograde for a whole class, in parallel.

nbgrader grades one notebook after another, into one SQLite gradebook that
takes one writer at a time. Here each student is one `nbgrader autograde
ASSIGNMENT --student ID` of its own, in the course directory with its config
(so the same preprocessors and the same scores as a serial run), writing
into a private copy of the gradebook. N of them run at once. When all have
ended, the graded submissions go into the course's gradebook.db in one
transaction (gradebook.merge).

A student whose grading fails (a timeout, a dead kernel, a broken notebook)
is reported, and their gradebook rows are merged as nbgrader left them, as a
serial run would; it never stops the others. A rerun grades only the
students whose submitted folder changed since they were last graded
(fingerprints in .autograde-state.json), unless forced.

Each job is a lane with two warm helpers, started once: a grader
(autograder.notebook.server) that the out-of-kernel grading of every student
it takes connects to (DDP_GRADER_SOCKET), and an nbgrader (warm_nbgrader)
that each student's `nbgrader autograde` is forked from; so a class pays for
importing torch and nbgrader once per job rather than once per student. A
lane whose student was killed gets fresh helpers.

On a GPU runner each job gets GPUs of its own through CUDA_VISIBLE_DEVICES,
packed so that no GPU is shared (`gpu_slots`); its grader sees only those.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape

from .._process import NoAnswer
from ..errors import CannotGrade
from ..notebook.client import SOCKET_VARIABLE, GraderServer
from .gradebook import merge
from .warm_nbgrader import WarmNbgrader

STATE_FILE = ".autograde-state.json"
DEFAULT_STUDENT_TIMEOUT_S = 1800.0
DEFAULT_GPUS_PER_JOB = 3  # a rank each, at the largest world size the grade cells run
LOG_TAIL_LINES = 15


@dataclass
class Outcome:
    """How one student's grading ended."""

    student: str
    returncode: int | None  # None: killed before nbgrader ended
    seconds: float
    log: str = ""  # the tail of nbgrader's output, when it failed
    killed_by: str = "timed out"  # when killed: why, in a few words

    @property
    def failed(self) -> bool:
        return self.returncode != 0

    @property
    def why(self) -> str:
        return self.killed_by if self.returncode is None else f"nbgrader exited with status {self.returncode}"


@dataclass
class ClassRun:
    """What one `autograde` did."""

    assignment: str
    graded: list[Outcome] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # skipped: graded before, and not changed since
    seconds: float = 0.0

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.graded if o.failed]


def gpu_slots(gpus: list[str], per_job: int) -> list[list[str]]:
    """Disjoint sets of `per_job` GPUs, as many as the inventory holds: one per concurrent job."""
    if per_job < 1:
        raise ValueError("a job needs at least one GPU")
    return [gpus[start : start + per_job] for start in range(0, len(gpus) - per_job + 1, per_job)]


def gpu_inventory() -> list[str]:
    """The GPUs this machine shows the grader (CUDA_VISIBLE_DEVICES honoured), by index or id."""
    from ..launch.backend import visible_gpus

    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    if shown is not None:
        return [g for g in (part.strip() for part in shown.split(",")) if g][: visible_gpus()]
    return [str(i) for i in range(visible_gpus())]


def submissions(course: Path, assignment: str) -> dict[str, Path]:
    """student -> their submitted folder of this assignment."""
    submitted = course / "submitted"
    found = sorted(submitted.glob(f"*/{assignment}")) if submitted.is_dir() else []
    return {folder.parent.name: folder for folder in found if folder.is_dir()}


def fingerprint(folder: Path) -> str:
    """Of a submitted folder: every file's name and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _assignment_known(course_db: Path, assignment: str) -> bool:
    import sqlite3

    db = sqlite3.connect(f"file:{course_db}?mode=ro", uri=True)
    try:
        return db.execute("SELECT 1 FROM assignment WHERE name = ?", (assignment,)).fetchone() is not None
    except sqlite3.Error:
        return False
    finally:
        db.close()


def _graded_before(course_db: Path, assignment: str, student: str) -> bool:
    import sqlite3

    db = sqlite3.connect(f"file:{course_db}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT 1 FROM submitted_assignment s JOIN assignment a ON s.assignment_id = a.id "
            "WHERE a.name = ? AND s.student_id = ?",
            (assignment, student),
        ).fetchone()
        return row is not None
    finally:
        db.close()


class _State:
    """The fingerprint of each student's folder when it was last graded, per assignment."""

    def __init__(self, course: Path):
        self.path = course / STATE_FILE
        try:
            self.data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def get(self, assignment: str, student: str) -> str | None:
        return self.data.get(assignment, {}).get(student)

    def set(self, assignment: str, student: str, value: str) -> None:
        self.data.setdefault(assignment, {})[student] = value

    def save(self) -> None:
        from .._files import write_text

        write_text(self.path, json.dumps(self.data, indent=1, sort_keys=True))


def plan(course: Path, assignment: str, students: list[str] | None, force: bool) -> tuple[dict, list[str]]:
    """(student -> folder to grade, students left alone as unchanged). Raises CannotGrade on bad input."""
    course_db = course / "gradebook.db"
    if not (course / "nbgrader_config.py").is_file() or not course_db.is_file():
        raise CannotGrade(
            f"{course} is not an nbgrader course directory with a gradebook (no nbgrader_config.py or gradebook.db).",
            "Run this in the course directory, after `nbgrader db assignment add` and `nbgrader generate_assignment`.",
        )
    if not _assignment_known(course_db, assignment):
        raise CannotGrade(
            f"There is no assignment {assignment!r} in the gradebook.",
            f"Check its name, or run `nbgrader generate_assignment {assignment}` first.",
        )
    found = submissions(course, assignment)
    if students:
        missing = [s for s in students if s not in found]
        if missing:
            raise CannotGrade(
                f"No submission of {assignment!r} from {', '.join(missing)}.",
                f"Their notebooks belong in submitted/<student>/{assignment}/.",
            )
        found = {s: found[s] for s in students}
    if not found:
        raise CannotGrade(
            f"Nobody has submitted {assignment!r}: submitted/*/{assignment}/ holds nothing.",
            "Collect the submissions first (nbgrader collect, or copy them into submitted/).",
        )
    state, chosen, unchanged = _State(course), {}, []
    for student, folder in found.items():
        same = state.get(assignment, student) == fingerprint(folder)
        if same and not force and _graded_before(course_db, assignment, student):
            unchanged.append(student)
        else:
            chosen[student] = folder
    return chosen, unchanged


def nbgrader_env(gpus: list[str] | None = None) -> dict[str, str]:
    """This environment for an nbgrader command, with `gpus` shown to it (None: as they are)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # nbgrader runs `alembic`
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return env


def autograde_args(assignment: str, student: str, db: Path | str) -> list[str]:
    """nbgrader's own autograde of one student, into the gradebook at `db`: what follows `nbgrader`."""
    return ["autograde", assignment, "--student", student, "--force", f"--db=sqlite:///{db}"]


def autograde_command(assignment: str, student: str, db: Path | str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *autograde_args(assignment, student, db)]


@dataclass
class Lane:
    """One job's share of the machine: its GPUs (None: as they are; []: hidden), the
    warm nbgrader that each of its students is forked from, and the warm grader
    that grades their notebooks. Both start with the lane's first student; after a
    student who was killed, or one that took a helper down, both start afresh."""

    gpus: list[str] | None
    folder: Path  # private (0700): the grader's socket and the logs
    number: int
    nbgrader: WarmNbgrader | None = None
    grader: GraderServer | None = None

    @property
    def socket_path(self) -> Path:
        return self.folder / f"grader-{self.number}.sock"

    def autograde(self, argv: list[str], course: Path, log: Path, timeout_s: float) -> tuple[int | None, str]:
        """(nbgrader ARGV's exit status, None if it was killed; why it was killed)."""
        if self.nbgrader is None or not self.nbgrader.alive():
            self._start()
        try:
            code, why = self.nbgrader.run(argv, str(course), self._env(), str(log), timeout_s), "timed out"
        except NoAnswer as error:
            code, why = None, f"stopped: {error}"
        if code is None or (self.grader is not None and not self.grader.alive()):
            self.stop()
        return code, why

    def _start(self) -> None:
        self.stop()
        env = nbgrader_env(self.gpus)
        self.socket_path.unlink(missing_ok=True)
        self.grader, self.nbgrader = GraderServer(str(self.socket_path), env=env), WarmNbgrader(env=env)
        try:
            self.grader.wait_ready()
        except NoAnswer:  # then each notebook starts a grader of its own, as under plain nbgrader
            self.grader = None

    def _env(self) -> dict[str, str]:
        env = nbgrader_env(self.gpus)
        if self.grader is not None and self.grader.alive():
            env[SOCKET_VARIABLE] = str(self.socket_path)
        return env

    def stop(self) -> None:
        for helper in (self.nbgrader, self.grader):
            if helper is not None:
                helper.stop()
        self.nbgrader = self.grader = None


def grade_one(lane: Lane, course: Path, assignment: str, student: str, db: Path, timeout_s: float) -> Outcome:
    """nbgrader's own autograde of one student, in `lane`, into the gradebook at `db`."""
    started = time.monotonic()
    log = lane.folder / f"{student}.log"
    code, why = lane.autograde(autograde_args(assignment, student, db), course, log, timeout_s)
    output = log.read_text(errors="replace") if log.exists() else ""
    log.unlink(missing_ok=True)
    if code is None:
        output += f"\nKilled: the grading took longer than {timeout_s:g} s." if why == "timed out" else f"\n{why}"
    seconds = time.monotonic() - started
    return Outcome(student, code, seconds, log_tail(output) if code != 0 else "", why)


def log_tail(log: str) -> str:
    """The last lines of a grading's log: what a failure report shows."""
    return "\n".join(log.strip().splitlines()[-LOG_TAIL_LINES:])


class Progress:
    """What a caller hears while the class is graded; these do nothing."""

    def begin(self, total: int, unchanged: list[str]) -> None: ...

    def started(self, running: set[str]) -> None: ...

    def finished(self, outcome: Outcome, running: set[str]) -> None: ...


SILENT = Progress()


class ConsoleProgress(Progress):
    """A rich progress bar: done and total, the students being graded, an ETA, and failures as they happen."""

    def __init__(self, console, assignment: str):
        from rich import progress

        self.console, self.assignment = console, assignment
        self.bar = progress.Progress(
            progress.TextColumn("{task.description}"),
            progress.BarColumn(),
            progress.MofNCompleteColumn(),
            progress.TimeElapsedColumn(),
            progress.TextColumn("eta"),
            progress.TimeRemainingColumn(),
            progress.TextColumn("[dim]{task.fields[running]}"),
            console=console,
            transient=True,
        )
        self.task = None

    def begin(self, total: int, unchanged: list[str]) -> None:
        if unchanged:
            self.console.print(f"Unchanged since last graded, left as they are: {escape(', '.join(unchanged))}")
        self.bar.start()
        self.task = self.bar.add_task(f"autograde {self.assignment}", total=total, running="")

    def started(self, running: set[str]) -> None:
        self.bar.update(self.task, running=_grading(running))

    def finished(self, outcome: Outcome, running: set[str]) -> None:
        self.bar.update(self.task, advance=1, running=_grading(running))
        if outcome.failed:
            why = escape(f"{outcome.why} after {outcome.seconds:.0f} s")
            self.console.print(f"[bold red]{escape(outcome.student)}[/]: {why}")

    def end(self) -> None:
        self.bar.stop()


def _grading(running: set[str]) -> str:
    """The progress line's list of the students being graded (escaped: it is markup)."""
    return escape("grading " + ", ".join(sorted(running))) if running else ""


def autograde(
    course: Path,
    assignment: str,
    jobs: int = 2,
    students: list[str] | None = None,
    force: bool = False,
    backend: str = "auto",
    gpus_per_job: int = DEFAULT_GPUS_PER_JOB,
    timeout_s: float = DEFAULT_STUDENT_TIMEOUT_S,
    progress: Progress = SILENT,
) -> ClassRun:
    """Grade every changed submission of `assignment`, `jobs` at a time, and merge them into gradebook.db."""
    if jobs < 1:
        raise CannotGrade(f"--jobs must be at least 1, not {jobs}.", "Use --jobs 1 to grade one student at a time.")
    course = course.resolve()
    chosen, unchanged = plan(course, assignment, students, force)
    slots = _slots(backend, gpus_per_job, jobs)
    run = ClassRun(assignment, unchanged=unchanged)
    started = time.monotonic()
    private_dir = Path(tempfile.mkdtemp(prefix="ddp-autograde-"))  # 0700: the graders' sockets are in it
    width = min(jobs, len(slots)) if slots else jobs
    hidden = [] if backend == "gloo" else None  # []: the GPUs hidden
    lanes = [Lane(slots[n] if slots else hidden, private_dir, n) for n in range(width)]
    free, lock, running = list(lanes), threading.Lock(), set()

    def one(student: str) -> Outcome:
        db = private_dir / f"{student}.db"
        shutil.copyfile(course / "gradebook.db", db)  # nothing writes the course's gradebook until the merge
        with lock:
            lane = free.pop()
            running.add(student)
            progress.started(set(running))
        try:
            outcome = grade_one(lane, course, assignment, student, db, timeout_s)
        finally:  # the lane is free again even when grade_one raised; its error goes on as it is
            with lock:
                free.append(lane)
                running.discard(student)
        with lock:
            progress.finished(outcome, set(running))
        return outcome

    progress.begin(len(chosen), unchanged)
    try:
        with ThreadPoolExecutor(max_workers=width) as pool:
            try:
                run.graded = list(pool.map(one, chosen))
            except BaseException:  # an interrupt: nothing of this run may go on grading
                for lane in lanes:
                    lane.stop()
                pool.shutdown(cancel_futures=True)
                raise
        gradebooks = {o.student: private_dir / f"{o.student}.db" for o in run.graded}
        record_grades(course, assignment, run.graded, gradebooks, {s: fingerprint(f) for s, f in chosen.items()})
    finally:
        for lane in lanes:
            lane.stop()
        shutil.rmtree(private_dir, ignore_errors=True)
    run.seconds = time.monotonic() - started
    return run


def record_grades(
    course: Path, assignment: str, outcomes: list[Outcome], gradebooks: dict[str, Path], fingerprints: dict[str, str]
) -> None:
    """Merge what nbgrader wrote into the course's gradebook, in one transaction, and
    remember the fingerprints of those graded. A grading that failed is merged as
    nbgrader left it, as a serial run would; one that was killed before nbgrader
    ended leaves the student's grades as they were."""
    ended = {o.student: gradebooks[o.student] for o in outcomes if o.returncode is not None}
    merge(course / "gradebook.db", ended, assignment)
    state = _State(course)
    for outcome in outcomes:
        if not outcome.failed:
            state.set(assignment, outcome.student, fingerprints[outcome.student])
    state.save()


def _slots(backend: str, per_job: int, jobs: int) -> list[list[str]]:
    """The GPU sets that the jobs take in turn; [] when grading on the CPU."""
    if backend == "gloo":
        return []
    inventory = gpu_inventory()
    slots = gpu_slots(inventory, per_job) if inventory else []
    if backend == "nccl" and not slots:
        raise CannotGrade(
            f"--backend nccl needs {per_job} GPUs per student, and this machine shows {len(inventory)}.",
            "Use --backend gloo to grade on the CPU, or a smaller --gpus-per-job.",
        )
    return slots

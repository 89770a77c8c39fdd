"""`python -m autograder autograde ASSIGNMENT...`: nbgrader's autograde for a whole class, in parallel.

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
importing torch and nbgrader once per job rather than once per student, and,
given several assignments (or --all), once for them all. A lane whose student
was killed gets fresh helpers.

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

from .._process import NoAnswer
from ..errors import CannotGrade
from ..notebook.client import SOCKET_VARIABLE, GraderServer
from .class_progress import SILENT, Progress
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
    assignment: str = ""

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


def submitted_assignments(course: Path) -> list[str]:
    """The gradebook's assignments, in the order they were added, that someone has submitted."""
    import sqlite3

    if not (course / "gradebook.db").is_file():
        return []
    db = sqlite3.connect(f"file:{course / 'gradebook.db'}?mode=ro", uri=True)
    try:
        names = [row[0] for row in db.execute("SELECT name FROM assignment ORDER BY rowid")]
    except sqlite3.Error:
        names = []
    finally:
        db.close()
    return [name for name in names if submissions(course, name)]


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


def plan(
    course: Path, assignment: str, students: list[str] | None, force: bool, one_of_several: bool = False
) -> tuple[dict, list[str]]:
    """(student -> folder to grade, students left alone as unchanged). Raises CannotGrade on bad input.
    One of several assignments may lack submissions, or those of the students named."""
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
    if students and one_of_several:
        found = {s: found[s] for s in students if s in found}
    elif students:
        missing = [s for s in students if s not in found]
        if missing:
            raise CannotGrade(
                f"No submission of {assignment!r} from {', '.join(missing)}.",
                f"Their notebooks belong in submitted/<student>/{assignment}/.",
            )
        found = {s: found[s] for s in students}
    if not found and not one_of_several:
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
    return Outcome(student, code, seconds, log_tail(output) if code != 0 else "", why, assignment)


def log_tail(log: str) -> str:
    """The last lines of a grading's log: what a failure report shows."""
    return "\n".join(log.strip().splitlines()[-LOG_TAIL_LINES:])


def autograde(course: Path, assignment: str, **options) -> ClassRun:
    """Grade every changed submission of `assignment`, `jobs` at a time, and merge them into gradebook.db."""
    return autograde_course(course, [assignment], **options)[0]


def autograde_course(
    course: Path,
    assignments: list[str],
    jobs: int = 2,
    students: list[str] | None = None,
    force: bool = False,
    backend: str = "auto",
    gpus_per_job: int = DEFAULT_GPUS_PER_JOB,
    timeout_s: float = DEFAULT_STUDENT_TIMEOUT_S,
    progress: Progress = SILENT,
) -> list[ClassRun]:
    """Grade every changed submission of each assignment, `jobs` at a time, in lanes that start once
    for them all (each assignment's run, then its merge into gradebook.db: one ClassRun each)."""
    if jobs < 1:
        raise CannotGrade(f"--jobs must be at least 1, not {jobs}.", "Use --jobs 1 to grade one student at a time.")
    course = course.resolve()
    plans = _plans(course, assignments, students, force)
    slots = _slots(backend, gpus_per_job, jobs)
    runs = {a: ClassRun(a, unchanged=unchanged) for a, (_, unchanged) in plans.items()}
    tasks = [(a, student) for a, (chosen, _) in plans.items() for student in chosen]
    started = time.monotonic()
    private_dir = Path(tempfile.mkdtemp(prefix="ddp-autograde-"))  # 0700: the graders' sockets are in it
    hidden = [] if backend == "gloo" else None  # []: the GPUs hidden
    lanes = [Lane(slots[n] if slots else hidden, private_dir, n) for n in range(min(jobs, len(slots)) or jobs)]
    pool = LanePool(lanes, course, private_dir, timeout_s, progress, several=len(assignments) > 1)
    progress.begin(len(tasks), [pool.name(a, s) for a, run in runs.items() for s in run.unchanged])
    try:
        for (assignment, _), outcome in zip(tasks, pool.grade_all(tasks), strict=True):
            runs[assignment].graded.append(outcome)
        for assignment, run in runs.items():
            gradebooks = {o.student: pool.gradebook(assignment, o.student) for o in run.graded}
            fingerprints = {s: fingerprint(f) for s, f in plans[assignment][0].items()}
            record_grades(course, assignment, run.graded, gradebooks, fingerprints)
    finally:
        pool.stop()
        shutil.rmtree(private_dir, ignore_errors=True)
    for run in runs.values():
        run.seconds = time.monotonic() - started
    return list(runs.values())


def _plans(course: Path, assignments: list[str], students: list[str] | None, force: bool) -> dict:
    """Each assignment's plan; raises CannotGrade when there is nothing at all to grade (of one
    assignment, plan says so itself)."""
    several = len(assignments) > 1
    plans = {a: plan(course, a, students, force, one_of_several=several) for a in assignments}
    if several and not any(chosen or unchanged for chosen, unchanged in plans.values()):
        among = f" among {', '.join(students)}" if students else ""
        raise CannotGrade(
            f"Nobody has submitted {', '.join(assignments)}{among}.",
            "Collect the submissions first (nbgrader collect, or copy them into submitted/).",
        )
    return plans


class LanePool:
    """The class's lanes, each grading one submission at a time, into a private copy of the
    gradebook; the progress hears of each grading as it starts and ends."""

    def __init__(self, lanes, course: Path, private_dir: Path, timeout_s: float, progress: Progress, several: bool):
        self.lanes, self.free, self.lock, self.running = lanes, list(lanes), threading.Lock(), set()
        self.course, self.private_dir, self.timeout_s, self.progress = course, private_dir, timeout_s, progress
        self.several = several

    def name(self, assignment: str, student: str) -> str:
        """How the progress names a grading: the student, and with several assignments, which."""
        return f"{student}/{assignment}" if self.several else student

    def gradebook(self, assignment: str, student: str) -> Path:
        return self.private_dir / f"{assignment}-{student}.db"

    def grade_all(self, tasks: list[tuple[str, str]]) -> list[Outcome]:
        with ThreadPoolExecutor(max_workers=len(self.lanes)) as pool:
            try:
                return list(pool.map(self.grade, tasks))
            except BaseException:  # an interrupt: nothing of this run may go on grading
                self.stop()
                pool.shutdown(cancel_futures=True)
                raise

    def grade(self, task: tuple[str, str]) -> Outcome:
        assignment, student = task
        db = self.gradebook(assignment, student)
        shutil.copyfile(self.course / "gradebook.db", db)  # nothing writes the course's gradebook until the merge
        with self.lock:
            lane = self.free.pop()
            self.running.add(self.name(*task))
            self.progress.started(set(self.running))
        try:
            outcome = grade_one(lane, self.course, assignment, student, db, self.timeout_s)
        finally:  # the lane is free again even when grade_one raised; its error goes on as it is
            with self.lock:
                self.free.append(lane)
                self.running.discard(self.name(*task))
        with self.lock:
            self.progress.finished(outcome, set(self.running))
        return outcome

    def stop(self) -> None:
        for lane in self.lanes:
            lane.stop()


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

"""The grading pipeline: load -> preflight -> launch -> judge -> report.

Each stage is one call; the run's folder and job are built once, here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from . import submission as submissions
from .errors import CannotGrade
from .exercises import EXERCISES, Exercise
from .judge.checks import SYNC_TOLERANCE, run_checks, training_sampler, weight_spread
from .judge.hints import hint_for
from .judge.records import RunRecords, collect
from .judge.verdict import RankSummary, Report
from .launch import DEFAULT_TIMEOUT_S, DEFAULT_WORLD_SIZE, LAUNCHERS, Job, RankStatus, launcher
from .launch import backend as backends
from .wording import RANK_STATUS_WORDS, exit_phrase

MAX_WORLD_SIZE = 16
PARTITION_EPOCHS = 6  # epochs drawn in the partition map


def _validated(exercise: str, world_size: int, backend: str, timeout_s: float, launcher_kind: str | None) -> Exercise:
    if exercise not in EXERCISES:
        raise CannotGrade(f"Unknown exercise {exercise!r}.", f"Choose one of: {', '.join(EXERCISES)}.")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise CannotGrade(f"--world-size must be between 1 and {MAX_WORLD_SIZE}, not {world_size}.")
    if not timeout_s > 0:
        raise CannotGrade(f"--timeout must be a positive number of seconds, not {timeout_s}.")
    if backend not in backends.BACKENDS:
        raise CannotGrade(f"Unknown backend {backend!r}.", f"Choose one of: {', '.join(backends.BACKENDS)}.")
    if launcher_kind is not None and launcher_kind not in LAUNCHERS:
        raise CannotGrade(f"Unknown launcher {launcher_kind!r}.", f"Choose one of: {', '.join(LAUNCHERS)}.")
    return EXERCISES[exercise]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


def _write_code(code_dir: Path, sub: submissions.Submission) -> Path:
    """The submission as the ranks import it, with a notebook's %%writefile files beside it."""
    code_dir.mkdir()
    module_path = code_dir / sub.module_file_name
    module_path.write_text(sub.code, encoding="utf-8")
    for name, body in sub.written_files.items():
        target = (code_dir / name).resolve()
        if code_dir.resolve() in target.parents:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body, encoding="utf-8")
    return module_path


def _run(
    exercise: Exercise,
    sub: submissions.Submission,
    run_dir: Path,
    world_size: int,
    backend: str,
    timeout_s: float,
    fork_from_here: bool,
    launcher_kind: str,
) -> RunRecords:
    resolved, hide_gpus = backends.resolve(backend, world_size)
    workdir, private_dir = run_dir / "work", run_dir / "private"
    workdir.mkdir()
    private_dir.mkdir()
    module_path = _write_code(run_dir / "code", sub)
    exercise.prepare(workdir)
    problem = submissions.preflight(sub)
    if problem is not None:
        return RunRecords(exercise.name, world_size, resolved, [], None, problem=problem)
    provided = _files(workdir)
    job = Job(world_size, resolved, hide_gpus, timeout_s, module_path, workdir, sub.is_notebook, fork_from_here)
    result = launcher(launcher_kind).launch(job, private_dir)
    return collect(exercise.name, world_size, resolved, result, sorted(_files(workdir) - provided))


def record(
    path: str | os.PathLike,
    exercise: str,
    world_size: int = DEFAULT_WORLD_SIZE,
    backend: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    fork_from_here: bool = False,
    launcher_kind: str | None = None,
) -> tuple[submissions.Submission, RunRecords]:
    """Load, preflight and launch: the submission and the records of its run,
    not yet judged. Raises CannotGrade when it cannot be graded at all."""
    chosen = _validated(exercise, world_size, backend, timeout_s, launcher_kind)
    sub = submissions.load(path)
    run_dir = Path(tempfile.mkdtemp(prefix="ddp-grade-"))
    try:
        kind = launcher_kind or chosen.launcher
        return sub, _run(chosen, sub, run_dir, world_size, backend, timeout_s, fork_from_here, kind)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def judge(sub: submissions.Submission, run: RunRecords) -> Report:
    """Check the records and build the report."""
    return _report(run, sub, run_checks(run, EXERCISES[run.exercise].checks))


def grade(path: str | os.PathLike, exercise: str, *args, **kwargs) -> Report:
    """Grade one submission: record() then judge(), with record()'s arguments.
    Raises CannotGrade when it cannot be graded at all.

    fork_from_here: start the ranks by forking this process (fast). Only for
    a process that has run no torch computation, such as the command line.
    launcher_kind: how ranks start (autograder.launch.LAUNCHERS); default: the exercise's.
    """
    return judge(*record(path, exercise, *args, **kwargs))


# --- turning records into the report ------------------------------------------


def _student_location(sub: submissions.Submission, frames: list[dict]) -> str:
    if not frames:
        return ""
    last = frames[-1]
    code = f": {last['code']}" if last.get("code") else ""
    where = "at the top level of the file" if last["function"] == "<module>" else f"in {last['function']}"
    return f" ({sub.path.name}, {sub.where(last['line'])}, {where}{code})"


def _rank_error(run: RunRecords, sub: submissions.Submission, rank: int) -> str | None:
    records = run.ranks[rank]
    error, outcome = records.error, records.outcome
    if error is not None:
        name = "" if error["from_grader"] else f"{error['type']}: "
        return f"{name}{error['message']}{_student_location(sub, error['frames'])}"
    if outcome is None:
        return None
    if outcome.status == RankStatus.HUNG:
        return f"{RANK_STATUS_WORDS[RankStatus.HUNG]}{_hung_location(sub, outcome.stack)}"
    if outcome.status == RankStatus.STOPPED:
        return RANK_STATUS_WORDS[RankStatus.STOPPED]
    if outcome.exit_code not in (0, None):
        return (
            f"the process {exit_phrase(outcome.exit_code)} before main returned "
            "(os._exit, a crash, or running out of memory)"
        )
    return None


def _hung_location(sub: submissions.Submission, stack: str) -> str:
    """The innermost line of the student's file in a faulthandler dump."""
    for line in stack.splitlines():
        line = line.strip()
        if line.startswith("File ") and f'/{sub.module_file_name}"' in line:
            number = int(line.split(", line ")[1].split()[0])
            function = line.rsplit(" in ", 1)[-1]
            code = sub.code.splitlines()[number - 1].strip() if number <= len(sub.code.splitlines()) else ""
            return f", at {sub.path.name} {sub.where(number)}, in {function}: {code}"
    return ""


def _root_failure(run: RunRecords) -> int:
    """The rank that failed first. Its error is the cause; the others often
    fail a moment later only because it is gone ("Connection closed by peer")."""

    def failed_at(records) -> float:
        times = [records.error["time"]] if records.error else []
        if records.outcome.exited_at is not None:
            times.append(records.outcome.exited_at)
        return min(times, default=float("inf"))

    failed = [r for r in run.ranks if r.outcome and r.outcome.status == RankStatus.FAILED]
    return min(failed, key=failed_at).rank if failed else run.launch.first_failure


def _launch_error(run: RunRecords, sub: submissions.Submission, ranks: list[RankSummary]) -> tuple[str | None, str]:
    if run.problem is not None:
        return run.problem.message, run.problem.hint
    result = run.launch
    if result.start_error:
        return (
            f"The ranks could not be started: {result.start_error}",
            "This is a problem of the grading machine; tell your instructor.",
        )
    if result.hung:
        where = "; ".join(f"rank {r}: {ranks[r].error}" for r in result.hung)
        return (
            f"The run did not finish within the time limit. {where}.",
            "A rank waiting forever usually means the ranks did not call the same collectives: every rank must run "
            "the same training steps (a collective such as all_reduce or DDP's backward waits for all ranks).",
        )
    if result.first_failure is not None:
        rank = _root_failure(run)
        text = ranks[rank].error or "failed"
        own_hint = (run.ranks[rank].error or {}).get("hint")
        return f"Rank {rank} failed: {text}", (
            own_hint or hint_for(text) or "Fix this error first; the other ranks were stopped because of it."
        )
    return None, ""


def _details(run: RunRecords) -> dict:
    """The series behind the report's pictures."""
    partition = []
    for r in run.ranks:
        found = training_sampler(r)
        if found:
            epochs, length = found[1], found[0]["dataset"]["length"] if found[0]["dataset"] else None
        else:  # no DistributedSampler: what the DataLoader's own sampler handed out
            epochs = r.all("plain_sampler_epoch")
            length = epochs[0]["length"] if epochs else None
        partition.append(
            {"rank": r.rank, "epochs": [e["indices"] for e in epochs[:PARTITION_EPOCHS]], "dataset_length": length}
        )
    losses = [{"rank": r.rank, "losses": (r.first("training_end") or {}).get("losses", [])} for r in run.ranks]
    return {
        "partition": partition,
        "losses": losses,
        "weight_spread": weight_spread(run) if run.ranks else [],
        "sync_tolerance": SYNC_TOLERANCE,
    }


def _probe_errors(run: RunRecords) -> list[str]:
    return [
        f"rank {r.rank}: the grader could not observe {e['where']} ({e['error']}); tell your instructor."
        for r in run.ranks
        for e in r.all("probe_error")
    ]


def _report(run: RunRecords, sub: submissions.Submission, verdicts) -> Report:
    ranks = []
    for r in run.ranks:
        outcome = r.outcome
        ranks.append(
            RankSummary(
                r.rank,
                outcome.exit_code if outcome else None,
                outcome.status if outcome else RankStatus.NOT_STARTED,
                _rank_error(run, sub, r.rank),
                outcome.output if outcome else "",
                outcome.output_bytes if outcome else 0,
                outcome.stack if outcome and outcome.status == RankStatus.HUNG else "",
            )
        )
    error, hint = _launch_error(run, sub, ranks)
    return Report(
        run.exercise,
        run.world_size,
        run.backend,
        run.launch.duration_s if run.launch else 0.0,
        error,
        hint,
        ranks,
        verdicts,
        submission=str(sub.path),
        files_left=run.files_left,
        details=_details(run),
        probe_errors=_probe_errors(run),
    )

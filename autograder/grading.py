"""The grading pipeline: load -> preflight -> launch -> judge -> report.

Each stage is one call; the run's folder and job are built once, here.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from dataclasses import replace
from pathlib import Path

from . import submission as submissions
from .disk import inspect_checkpoints
from .errors import CannotGrade
from .exercises import EXERCISES, Exercise
from .judge.analysis import SYNC_TOLERANCE, training_sampler, weight_spread
from .judge.checks import run_checks
from .judge.hints import hint_for
from .judge.records import OwnLauncherRun, RunRecords, collect, collect_own_launcher, collect_torchrun
from .judge.tampering import TAMPERING_HINT, contradictions
from .judge.verdict import RankSummary, Report
from .launch import LAUNCHERS, Job, launcher
from .launch import backend as backends
from .launch.own import OwnLauncher
from .launch.sandbox import why_unavailable
from .schema.run import DEFAULT_OPTIONS, SANDBOX_POLICIES, RankStatus, RunOptions
from .wording import RANK_STATUS_WORDS, exit_phrase

MAX_WORLD_SIZE = 16
OWN_LAUNCHER_GRACE_S = 30.0  # the student's own launcher gets at least twice the graded run's time plus this
PARTITION_EPOCHS = 6  # epochs drawn in the partition map


def _validated(exercise: str, options: RunOptions) -> Exercise:
    if exercise not in EXERCISES:
        raise CannotGrade(f"Unknown exercise {exercise!r}.", f"Choose one of: {', '.join(EXERCISES)}.")
    if not 1 <= options.world_size <= MAX_WORLD_SIZE:
        raise CannotGrade(f"--world-size must be between 1 and {MAX_WORLD_SIZE}, not {options.world_size}.")
    if not options.timeout_s > 0:
        raise CannotGrade(f"--timeout must be a positive number of seconds, not {options.timeout_s}.")
    if options.backend not in backends.BACKENDS:
        raise CannotGrade(f"Unknown backend {options.backend!r}.", f"Choose one of: {', '.join(backends.BACKENDS)}.")
    if options.launcher is not None and options.launcher not in LAUNCHERS:
        raise CannotGrade(f"Unknown launcher {options.launcher!r}.", f"Choose one of: {', '.join(LAUNCHERS)}.")
    if options.sandbox not in SANDBOX_POLICIES:
        raise CannotGrade(
            f"Unknown sandbox policy {options.sandbox!r}.", f"Choose one of: {', '.join(SANDBOX_POLICIES)}."
        )
    if not options.limits.memory_bytes >= 2**20:
        raise CannotGrade(f"--memory-limit must be at least 1 MiB, not {options.limits.memory_bytes} bytes.")
    return EXERCISES[exercise]


_UNSANDBOXED = {"off": "the grader was told to run without the sandbox (--unsafe-no-sandbox)"}


def _sandboxed(policy: str) -> bool:
    """required: instructor grading, never without the sandbox. auto: a
    student's own check, which can only fool the student where there is none."""
    reason = why_unavailable()
    if policy == "required" and reason is not None:
        raise CannotGrade(
            f"Cannot grade in a sandbox here: {reason}.",
            "Grade on Linux as root, or where user namespaces are allowed, or add --unsafe-no-sandbox to run "
            "the student's code unconfined "
            "(only for code you trust, such as your own).",
        )
    return policy != "off" and reason is None


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
    options: RunOptions,
    sandboxed: bool,
    own_launcher_run: OwnLauncherRun | None,
) -> RunRecords:
    resolved, hide_gpus = backends.resolve(options.backend, options.world_size)
    workdir, private_dir = run_dir / "work", run_dir / "private"
    workdir.mkdir()
    private_dir.mkdir()
    module_path = _write_code(run_dir / "code", sub)
    exercise.prepare(workdir)
    problem = submissions.preflight(sub, needs_main=exercise.launcher != "torchrun")
    if problem is not None:
        return RunRecords(exercise.name, options.world_size, resolved, [], None, problem=problem)
    provided = _files(workdir)
    job = Job(
        world_size=options.world_size,
        backend=resolved,
        hide_gpus=hide_gpus,
        timeout_s=options.timeout_s,
        module_path=module_path,
        workdir=workdir,
        is_notebook=sub.is_notebook,
        fork_from_here=options.fork_from_here,
        sandboxed=sandboxed,
        limits=options.limits,
        evaluation=exercise.evaluation,
    )
    result = launcher(options.launcher or exercise.launcher).launch(job, private_dir)
    run = collect(exercise.name, options.world_size, resolved, result, sorted(_files(workdir) - provided))
    if result.attempts:
        run.torchrun = collect_torchrun(result)
    if run.all_finished and "launcher" in exercise.checks:
        run.own_launcher, run.own_launcher_ranks = own_launcher_run or _run_own_launcher(
            exercise, job, run_dir, result.duration_s
        )
    # Last: the own launcher may be forked from this process, which must have run no torch computation.
    saved = [e["path"] for r in run.ranks for e in r.all("torch_save")]
    run.checkpoints = inspect_checkpoints(workdir, run.files_left, saved)
    return run


def _run_own_launcher(exercise: Exercise, job: Job, run_dir: Path, graded_run_s: float):
    """The student's `if __name__ == "__main__":` block, in a working folder of
    its own, so what it writes cannot count as the graded ranks' files.

    It repeats the graded run's work from cold interpreters (the launcher and
    each rank import torch afresh), which on a loaded machine takes several
    times the warm graded run. So it gets what is left of the timeout, and at
    least twice the graded run plus a grace."""
    workdir = run_dir / "own_launcher_work"
    workdir.mkdir()
    exercise.prepare(workdir)
    deadline = min(job.timeout_s, max(job.timeout_s - graded_run_s, 2 * graded_run_s + OWN_LAUNCHER_GRACE_S))
    own_job = replace(job, workdir=workdir, timeout_s=deadline)
    return collect_own_launcher(OwnLauncher().launch(own_job, run_dir / "own_launcher"))


def record(
    path: str | os.PathLike,
    exercise: str,
    options: RunOptions = DEFAULT_OPTIONS,
    own_launcher_run: OwnLauncherRun | None = None,
) -> tuple[submissions.Submission, RunRecords]:
    """Load, preflight and launch: the submission and the records of its run,
    not yet judged. Raises CannotGrade when it cannot be graded at all.

    own_launcher_run: the run of the student's own launcher from another
    grading of the same file. That run is the same at every world size (the
    student's code chooses its own), so a second grading may reuse it."""
    chosen = _validated(exercise, options)
    sandboxed = _sandboxed(options.sandbox)
    sub = submissions.load(path)
    run_dir = Path(tempfile.mkdtemp(prefix="ddp-grade-"))
    try:
        run = _run(chosen, sub, run_dir, options, sandboxed, own_launcher_run)
        if not sandboxed:
            run.unsandboxed = _UNSANDBOXED.get(options.sandbox) or why_unavailable() or ""
        return sub, run
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def judge(sub: submissions.Submission, run: RunRecords) -> Report:
    """Check the records and build the report."""
    return _report(run, sub, run_checks(run, EXERCISES[run.exercise].checks))


def grade(path: str | os.PathLike, exercise: str, options: RunOptions = DEFAULT_OPTIONS) -> Report:
    """Grade one submission: record() then judge(). Raises CannotGrade when
    it cannot be graded at all."""
    return judge(*record(path, exercise, options))


def grade_at(
    path: str | os.PathLike, exercise: str, world_sizes, options: RunOptions = DEFAULT_OPTIONS
) -> dict[int, Report]:
    """Grade one submission at each world size, with the other options. The
    student's own launcher runs once, in the first grading that gets that
    far, and its run is reused by the others."""
    reports, own_launcher_run = {}, None
    for world_size in dict.fromkeys(world_sizes):
        sub, run = record(path, exercise, replace(options, world_size=world_size), own_launcher_run)
        if run.own_launcher is not None:
            own_launcher_run = (run.own_launcher, run.own_launcher_ranks)
        reports[world_size] = judge(sub, run)
    return reports


# --- turning records into the report ------------------------------------------


def _error_frame(records) -> dict | None:
    """The innermost line of the student's file where this rank's error was raised."""
    frames = records.error["frames"] if records.error else []
    return frames[-1] if frames else None


def _hung_frame(sub: submissions.Submission, stack: str) -> dict | None:
    """The innermost line of the student's file in a faulthandler dump."""
    lines = sub.code.splitlines()
    for line in stack.splitlines():
        line = line.strip()
        if line.startswith("File ") and f'/{sub.module_file_name}"' in line:
            number = int(line.split(", line ")[1].split()[0])
            code = lines[number - 1].strip() if number <= len(lines) else ""
            return {"line": number, "function": line.rsplit(" in ", 1)[-1], "code": code}
    return None


def _location(sub: submissions.Submission, frame: dict | None) -> str:
    """' (file.py, line 12, in main: code)'."""
    if frame is None:
        return ""
    code = f": {frame['code']}" if frame.get("code") else ""
    where = "at the top level of the file" if frame["function"] == "<module>" else f"in {frame['function']}"
    return f" ({sub.path.name}, {sub.where(frame['line'])}, {where}{code})"


def _over_limit(run: RunRecords, rank: int) -> str | None:
    """The sandbox's limit that stopped this rank, in words; None if none did."""
    evidence, outcome, error = run.launch.evidence, run.ranks[rank].outcome, run.ranks[rank].error
    memory = f"rank {rank} went over the {_gib(evidence.limits.get('memory_bytes', 0))} memory limit"
    if rank in evidence.over_memory:
        return f"{memory}, so the kernel stopped it"
    if evidence.sandboxed and not evidence.memory_by_cgroup and error is not None and _out_of_memory(error):
        return f"{memory}, so an allocation failed ({error['type']}: {error['message'][:200]})"
    if evidence.sandboxed and outcome is not None and outcome.exit_code == -signal.SIGXCPU:
        return f"rank {rank} used up its {evidence.limits['cpu_seconds']} s of CPU time, so the kernel stopped it"
    return None


def _out_of_memory(error: dict) -> bool:
    return error["type"] == "MemoryError" or "can't allocate memory" in error["message"]


def _gib(size: int) -> str:
    return f"{size / 2**30:g} GiB"


def _rank_error(run: RunRecords, sub: submissions.Submission, rank: int) -> str | None:
    records = run.ranks[rank]
    error, outcome = records.error, records.outcome
    over = _over_limit(run, rank)
    if over is not None:
        return over
    if error is not None:
        name = "" if error["from_grader"] else f"{error['type']}: "
        return f"{name}{error['message']}{_location(sub, _error_frame(records))}"
    if outcome is None:
        return None
    if outcome.status == RankStatus.HUNG:
        return f"{RANK_STATUS_WORDS[RankStatus.HUNG]}{_location(sub, _hung_frame(sub, outcome.stack))}"
    if outcome.status == RankStatus.STOPPED:
        return RANK_STATUS_WORDS[RankStatus.STOPPED]
    if outcome.exit_code not in (0, None):
        return (
            f"the process {exit_phrase(outcome.exit_code)} before main returned "
            "(os._exit, a crash, or running out of memory)"
        )
    return None


def _stopped_at(run: RunRecords, sub: submissions.Submission) -> str:
    """'CODE (file, line N)' where the root-cause rank stopped, for the
    report's row of checks not reached; empty when that is not known."""
    rank = None if run.all_finished else run.root_cause_rank
    if rank is None or rank >= len(run.ranks):
        return ""
    records = run.ranks[rank]
    frame = _error_frame(records)
    if frame is None and records.outcome is not None and records.outcome.status == RankStatus.HUNG:
        frame = _hung_frame(sub, records.outcome.stack)
    if frame is None:
        return ""
    code = f"`{frame['code']}` " if frame.get("code") else ""
    return f"{code}({sub.path.name}, {sub.where(frame['line'])}, in {frame['function']}, on rank {rank})"


def _launch_error(run: RunRecords, sub: submissions.Submission, ranks: list[RankSummary]) -> tuple[str | None, str]:
    if run.problem is not None:
        return run.problem.message, run.problem.hint
    tampering = contradictions(run)
    if tampering:
        return f"Tampering detected: {'; '.join(tampering)}.", TAMPERING_HINT
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
        rank = run.root_cause_rank
        text = ranks[rank].error or "failed"
        own_hint = (run.ranks[rank].error or {}).get("hint")
        return f"Rank {rank} failed: {text}", (
            own_hint or hint_for(text) or "Fix this error first; the other ranks were stopped because of it."
        )
    for r in run.ranks:
        if r.malformed:
            return (
                f"Not checked: rank {r.rank}'s records hold {r.malformed} event(s) that the grader did not write, "
                "so nothing this run recorded can be trusted.",
                "Leave the grader's probes and the records they send alone.",
            )
        if r.outcome is not None and r.outcome.status == RankStatus.FINISHED and not r.finished:
            return (
                f"Rank {r.rank} ended without returning from main, so the grader's end-of-run records are missing.",
                "Let main return normally: do not end the process from inside it (os._exit, os.kill).",
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
            {
                "rank": r.rank,
                "epochs": [e["indices"] for e in epochs[:PARTITION_EPOCHS]],
                "epochs_recorded": len(epochs),
                "dataset_length": length,
            }
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
                rank=r.rank,
                exit_code=outcome.exit_code if outcome else None,
                status=outcome.status if outcome else RankStatus.NOT_STARTED,
                error=_rank_error(run, sub, r.rank),
                output=outcome.output if outcome else "",
                output_bytes=outcome.output_bytes if outcome else 0,
                stack=outcome.stack if outcome and outcome.status == RankStatus.HUNG else "",
            )
        )
    error, hint = _launch_error(run, sub, ranks)
    return Report(
        exercise=run.exercise,
        world_size=run.world_size,
        backend=run.backend,
        duration_s=run.launch.duration_s if run.launch else 0.0,
        error=error,
        error_hint=hint,
        ranks=ranks,
        checks=verdicts,
        submission=str(sub.path),
        files_left=run.files_left,
        details=_details(run),
        probe_errors=_probe_errors(run),
        stopped_at=_stopped_at(run, sub),
        unsandboxed=run.unsandboxed,
    )

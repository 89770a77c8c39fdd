"""Launch: start the ranks with torch.multiprocessing, watch them against a
deadline, and leave no process behind.

One rank failing stops the others at once (they would otherwise wait in a
collective for gloo's 30-minute timeout). At the deadline every rank still
running is asked for its Python stack before it is killed.
"""
from __future__ import annotations

import importlib
import multiprocessing.connection
import os
import signal
import time
from dataclasses import dataclass, field

import torch.multiprocessing as mp

from .capture import CappedOutput
from .context import RunContext
from .rank import STACK_SIGNAL, RankSpec, run_rank

POLL_S = 0.1
STACK_WAIT_S = 1.0


@dataclass
class RankOutcome:
    rank: int
    exit_code: int | None
    # "finished", "failed", "stopped" (killed because another rank failed) or "hung"
    status: str
    output: str = ""
    output_bytes: int = 0
    stack: str = ""
    exited_at: float | None = None  # wall clock, when the launcher saw it exit


@dataclass
class LaunchResult:
    ranks: list[RankOutcome]
    duration_s: float
    first_failure: int | None = None  # the rank the launcher saw fail first
    hung: list[int] = field(default_factory=list)
    start_error: str | None = None  # the ranks could not be started at all


def _kill_everything(processes) -> None:
    for process in processes:
        for kill in (lambda: os.killpg(process.pid, signal.SIGKILL), process.kill):
            try:
                kill()  # the rank's group holds anything it started, too
            except (ProcessLookupError, PermissionError, OSError, ValueError):
                pass
    for process in processes:
        process.join(timeout=5)


def _read_stack(path) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-6000:]
    except OSError:
        return ""


def start_method(ctx: RunContext) -> str:
    """How to start ranks: as fast as is safe.

    Forking a process that has imported torch starts a rank in milliseconds,
    but only a process that has run no torch computation may be forked: a
    child forked after torch's OpenMP pool started hangs in its first
    parallel op. The caller knows whether this process is such a one (the
    command line is). Elsewhere a fork server, a clean process that imports
    torch once, forks the ranks. CUDA does not survive a fork, so GPU runs spawn.
    """
    if ctx.backend == "nccl":
        return "spawn"
    if ctx.fork_from_here:
        # DDP's constructor imports torch._dynamo (about 900 modules, seconds):
        # once here rather than in every rank.
        importlib.import_module("torch._dynamo")
        return "fork"
    mp.set_forkserver_preload(["torch", "torch._dynamo", "torch.distributed", "torch.nn.parallel", "autograder.rank"])
    return "forkserver"


def _rank_spec(ctx: RunContext, captures: list[CappedOutput], method: str) -> RankSpec:
    ranks = range(ctx.world_size)
    return RankSpec(
        world_size=ctx.world_size,
        backend=ctx.backend,
        hide_gpus=ctx.hide_gpus,
        is_notebook=ctx.is_notebook,
        module_path=str(ctx.module_path),
        source_dir=str(ctx.code_dir),
        workdir=str(ctx.workdir),
        store_path=str(ctx.store_path),
        record_paths=tuple(str(ctx.record_path(r)) for r in ranks),
        output_paths=tuple(c.path for c in captures),
        stack_paths=tuple(str(ctx.stack_path(r)) for r in ranks),
        inherited_fds=tuple(fd for c in captures for fd in c.parent_fds) if method == "fork" else (),
    )


def launch(ctx: RunContext) -> LaunchResult:
    method = start_method(ctx)
    captures = [CappedOutput(str(ctx.output_path(r))) for r in range(ctx.world_size)]
    started = time.monotonic()
    processes = []
    try:
        try:
            context = mp.start_processes(run_rank, args=(_rank_spec(ctx, captures, method),), nprocs=ctx.world_size,
                                         join=False, start_method=method)
        except Exception as error:  # e.g. out of memory or processes
            return LaunchResult([], time.monotonic() - started, start_error=f"{type(error).__name__}: {error}")
        finally:
            for capture in captures:  # drain even if starting failed half-way
                capture.start()
        processes = context.processes
        exit_codes, exit_times, first_failure = _watch(processes, started + ctx.timeout_s)
        hung = [r for r in range(ctx.world_size) if r not in exit_codes and first_failure is None]
        for rank in hung:
            try:
                os.kill(processes[rank].pid, STACK_SIGNAL)
            except ProcessLookupError:
                pass
        if hung:
            time.sleep(STACK_WAIT_S)
    finally:
        _kill_everything(processes)
        for capture in captures:
            capture.close()
    duration = time.monotonic() - started

    outcomes = []
    for rank, process in enumerate(processes):
        code = exit_codes.get(rank, process.exitcode)
        if rank in hung:
            status = "hung"
        elif rank not in exit_codes and code == -signal.SIGKILL:
            status = "stopped"
        else:
            status = "finished" if code == 0 else "failed"
        capture = captures[rank]
        outcomes.append(RankOutcome(rank, code, status, capture.text(), capture.total_bytes,
                                    _read_stack(ctx.stack_path(rank)), exit_times.get(rank)))
    return LaunchResult(outcomes, duration, first_failure, hung)


def _watch(processes, deadline: float) -> tuple[dict[int, int], dict[int, float], int | None]:
    """Wait until every rank has exited, one has failed, or the deadline."""
    pending = {p.sentinel: rank for rank, p in enumerate(processes)}
    exit_codes: dict[int, int] = {}
    exit_times: dict[int, float] = {}
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return exit_codes, exit_times, None
        for sentinel in multiprocessing.connection.wait(list(pending), timeout=min(POLL_S, remaining)):
            rank = pending.pop(sentinel)
            processes[rank].join()
            exit_codes[rank], exit_times[rank] = processes[rank].exitcode, time.time()
            if exit_codes[rank] != 0:
                return exit_codes, exit_times, rank
    return exit_codes, exit_times, None

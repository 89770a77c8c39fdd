"""Watching started ranks, the part every local launcher shares.

One rank failing stops the others at once (they would otherwise wait in a
collective for gloo's 30-minute timeout). At the deadline every rank still
running is asked for its Python stack before it is killed. Each rank leads
its own process group, so killing the group kills what it started, too.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..rank.spec import STACK_SIGNAL, RankSpec
from ..schema.run import MAX_OWN_LAUNCHER_RANKS, LaunchResult, RankOutcome, RankStatus
from .capture import CappedOutput
from .contain import Containment

POLL_S = 0.1
STACK_WAIT_S = 1.0


@dataclass
class StartedRank:
    """A started rank, however it was started."""

    pid: int
    sentinel: int  # readable once the process has exited
    wait: Callable[[], int]  # reaps it; its exit code, negative for a signal
    exit_code: int | None = None


def start_command(argv: list[str], output_path: str) -> StartedRank:
    """A rank (or the student's launcher) as a command of its own. It sends
    its output to the capture itself; this catches what Python says before it can."""
    with open(output_path, "wb") as output:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=output)
    return StartedRank(process.pid, os.pidfd_open(process.pid), process.wait)


def stop_all(ranks: list[StartedRank], captures: list[CappedOutput]) -> None:
    """Kill every rank and all it started, reap them, and close their outputs."""
    for started in ranks:
        for kill in (os.killpg, os.kill):  # its group holds all it started; the rank alone if it had none yet
            try:
                kill(started.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
    for started in ranks:
        if started.exit_code is None:
            started.exit_code = started.wait()
    for capture in captures:
        capture.close()


def _read_stack(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-6000:]
    except OSError:
        return ""


def _watch(ranks: list[StartedRank], deadline: float) -> tuple[dict[int, float], int | None]:
    """Wait until every rank has exited, one has failed, or the deadline."""
    pending = {started.sentinel: rank for rank, started in enumerate(ranks)}
    exit_times: dict[int, float] = {}
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return exit_times, None
        for sentinel in multiprocessing.connection.wait(list(pending), timeout=min(POLL_S, remaining)):
            rank = pending.pop(sentinel)
            ranks[rank].exit_code, exit_times[rank] = ranks[rank].wait(), time.time()
            if ranks[rank].exit_code != 0:
                return exit_times, rank
    return exit_times, None


def supervise(
    ranks: list[StartedRank],
    captures: list[CappedOutput],
    spec: RankSpec,
    started_at: float,
    timeout_s: float,
    containment: Containment,
) -> LaunchResult:
    """Watch the ranks to the end, then kill all that is left and gather what was seen."""
    exit_times: dict[int, float] = {}
    first_failure, hung = None, []
    evidence = None
    try:
        exit_times, first_failure = _watch(ranks, started_at + timeout_s)
        hung = [r for r in range(len(ranks)) if r not in exit_times and first_failure is None]
        for rank in hung:
            try:
                os.kill(ranks[rank].pid, STACK_SIGNAL)
            except ProcessLookupError:
                pass
        if hung:
            time.sleep(STACK_WAIT_S)
    finally:
        stop_all(ranks, captures)
        evidence = containment.finish()
    outcomes = []
    for rank, started in enumerate(ranks):
        if rank in hung:
            status = RankStatus.HUNG
        elif rank not in exit_times and started.exit_code == -signal.SIGKILL:
            status = RankStatus.STOPPED
        else:
            status = RankStatus.FINISHED if started.exit_code == 0 else RankStatus.FAILED
        capture = captures[rank]
        outcomes.append(
            RankOutcome(
                rank=rank,
                exit_code=started.exit_code,
                status=status,
                output=capture.text(),
                output_bytes=capture.total_bytes,
                stack=_read_stack(spec.stack_paths[rank]),
                exited_at=exit_times.get(rank),
                lines=capture.tally.summary(),
            )
        )
    channel = containment.channel
    return LaunchResult(
        ranks=outcomes,
        duration_s=time.monotonic() - started_at,
        records=[channel.events("rank", r) for r in range(len(ranks))],
        first_failure=first_failure,
        hung=hung,
        started_records=[channel.events("started", r) for r in range(MAX_OWN_LAUNCHER_RANKS)],
        evidence=evidence,
        intrusions=channel.intrusions,
    )


def start_error(started_at: float, error: BaseException, containment: Containment) -> LaunchResult:
    containment.finish()
    return LaunchResult(
        ranks=[], duration_s=time.monotonic() - started_at, start_error=f"{type(error).__name__}: {error}"
    )

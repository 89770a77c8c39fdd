"""The multiprocessing launcher: ranks started by torch.multiprocessing on
this machine, as the student's own mp.spawn would start them."""

from __future__ import annotations

import importlib
import os
import time
from multiprocessing import forkserver, resource_tracker
from pathlib import Path

import torch.multiprocessing as mp

from ..rank.runner import run_rank
from ..rank.spec import RankSpec
from ..schema.run import LaunchResult
from . import Job, Launcher
from .capture import CappedOutput
from .contain import Containment
from .supervise import StartedRank, start_error, stop_all, supervise


def start_method(job: Job) -> str:
    """How to start ranks: as fast as is safe.

    Forking a process that has imported torch starts a rank in milliseconds,
    but only a process that has run no torch computation may be forked: a
    child forked after torch's OpenMP pool started hangs in its first
    parallel op. The caller knows whether this process is such a one (the
    command line is). Elsewhere a fork server, a clean process that imports
    torch once, forks the ranks. CUDA does not survive a fork, so GPU runs spawn.
    """
    if job.backend == "nccl":
        return "spawn"
    if job.fork_from_here:
        # DDP's constructor imports torch._dynamo (about 900 modules, seconds):
        # once here rather than in every rank.
        importlib.import_module("torch._dynamo")
        return "fork"
    return warm_method(job)


def warm_method(job: Job) -> str:
    """The fork server, whose one import of torch, DDP and the probes every process it forks shares."""
    if job.backend == "nccl":
        return "spawn"
    mp.set_forkserver_preload(WARM_MODULES)
    return "forkserver"


WARM_MODULES = ["torch", "torch._dynamo", "torch.distributed", "torch.nn.parallel", "autograder.rank.own_launcher"]


def start_fork_server() -> None:
    """Start the fork server now (it imports in the background), for this
    process and the processes forked from it (adopt_fork_server)."""
    mp.set_forkserver_preload(WARM_MODULES)
    forkserver.ensure_running()


def adopt_fork_server() -> None:
    """In a fork of the process that started the fork server: use that one.

    Python's forkserver checks that its server is alive by waiting on it,
    which only its parent may do; here a signal 0 does."""
    server = forkserver._forkserver
    pid = server._forkserver_pid
    if pid is None:
        return

    def ensure_running() -> None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:  # gone: this process starts a fork server of its own
            server._forkserver_pid = server._forkserver_address = None
            del server.ensure_running
            server.ensure_running()
            return
        resource_tracker.ensure_running()

    server.ensure_running = ensure_running


def started_process(process) -> StartedRank:
    def wait() -> int:
        process.join()
        return process.exitcode

    return StartedRank(process.pid, process.sentinel, wait)


class MultiprocessingLauncher(Launcher):
    kind = "mp"

    def launch(self, job: Job, private_dir: Path) -> LaunchResult:
        method = start_method(job)
        containment = Containment(job, private_dir)
        captures = [CappedOutput(str(private_dir / f"rank{r}.out")) for r in range(job.world_size)]
        inherited = (
            [*containment.parent_fds, *(fd for c in captures for fd in c.parent_fds)] if method == "fork" else []
        )
        spec = RankSpec.for_run(job, private_dir, containment, [c.path for c in captures], inherited)
        started_at = time.monotonic()
        failure = None
        try:
            context = mp.start_processes(run_rank, args=(spec,), nprocs=job.world_size, join=False, start_method=method)
        except Exception as error:  # e.g. out of memory or processes
            failure = error
        for capture in captures:  # drain even if starting failed half-way
            capture.start()
        if failure is not None:
            stop_all([], captures)
            return start_error(started_at, failure, containment)
        ranks = [started_process(p) for p in context.processes]
        return supervise(ranks, captures, spec, started_at, job.timeout_s, containment)

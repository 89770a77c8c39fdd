"""The multiprocessing launcher: ranks started by torch.multiprocessing on
this machine, as the student's own mp.spawn would start them."""

from __future__ import annotations

import importlib
import os
from multiprocessing import forkserver, resource_tracker

import torch.multiprocessing as mp

from ..rank.runner import run_rank
from . import Job
from .capture import CappedOutput
from .contain import Containment
from .skeleton import Launch, Launcher
from .supervise import StartedRank


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
    """A multiprocessing Process as a started rank, with a sentinel of its own to close."""

    def wait() -> int:
        process.join()
        return process.exitcode

    return StartedRank(process.pid, os.dup(process.sentinel), wait)


def forked_fds(slots: Job, containment: Containment, outputs: list[CappedOutput]) -> list[int]:
    """The launch's own descriptors, which a process forked from here inherits and closes first."""
    if start_method(slots) != "fork":
        return []
    return [*containment.parent_fds, *(fd for c in outputs for fd in c.parent_fds)]


class MultiprocessingLauncher(Launcher):
    kind = "mp"
    drains_after_start = True

    def inherited_fds(self, slots: Job, containment: Containment, outputs: list[CappedOutput]) -> list[int]:
        return forked_fds(slots, containment, outputs)

    def start(self, launch: Launch, started: list[StartedRank]) -> None:
        method, world_size = start_method(launch.job), launch.job.world_size
        context = mp.start_processes(run_rank, args=(launch.spec,), nprocs=world_size, join=False, start_method=method)
        started.extend(started_process(p) for p in context.processes)

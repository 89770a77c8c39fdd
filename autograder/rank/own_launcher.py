"""The student's own launcher: run the submission as `python FILE` would, so
that its `if __name__ == "__main__":` block starts the ranks itself.

    python -m autograder.rank.own_launcher SPEC

The probe here records the call to torch.multiprocessing's spawn or
start_processes (how many ranks it asked for) and whether the ranks it
started all finished. The ranks are started by the student's call, with the
student's start method; each one joins a process group on the grader's
rendezvous (as graded ranks do), whatever port the student chose, so many
gradings can share a machine.

A spawned rank imports the file again as `__mp_main__`. Before it does, the
spawn guard is installed (by the sitecustomize in spawned_hook/, on the ranks'
PYTHONPATH, or by the warm fork server before it serves): in a notebook a
cell that launches the job is normal, and must not launch it again inside
each rank.

When this process was forked from the grader's warm fork server, the
student's spawn starts its processes from a warm fork server of its own
(warm_spawn.py), with spawn's semantics.
"""

from __future__ import annotations

import os
import runpy
import sys

from ..schema.run import MAX_OWN_LAUNCHER_RANKS
from . import warm_spawn
from .probes.process_group import ProcessGroupProbe
from .probes.spawn_guard import SpawnGuardProbe
from .probes.state import RankState, StudentError
from .runner import enter_sandbox, isolate, open_channels, prepare_environment
from .spec import RankSpec

SPEC_VARIABLE = "DDP_GRADER_OWN_LAUNCHER"  # the spec, for the ranks the student's launcher starts
HOOK_DIR = os.path.join(os.path.dirname(__file__), "spawned_hook")


def _state(spec: RankSpec, rank: int, world_size: int, channel_path: str) -> RankState:
    return RankState(
        rank=rank,
        world_size=world_size,
        backend=spec.backend,
        store_path=spec.store_path,
        workdir=spec.workdir,
        channel_path=channel_path,
        is_notebook=spec.is_notebook,
        role="started",
    )


def _spec_from_environment() -> RankSpec:
    return RankSpec.from_json(os.environ[SPEC_VARIABLE])


def guard_spawned_rank() -> None:
    """Called by the hook at the start of every process the student's launcher spawns."""
    SpawnGuardProbe(_state(_spec_from_environment(), 0, 1, "")).install()


def _rank_with_probes(rank: int, fn, args, world_size: int) -> None:
    """What each started rank runs: the student's function, on the grader's rendezvous."""
    spec = _spec_from_environment()
    state = _state(spec, rank, world_size, spec.channel_path)
    probe = ProcessGroupProbe(state)
    probe.install()
    try:
        fn(rank, *args)
    finally:
        probe.finish()
        state.close()
    # As a graded rank does, skip the interpreter's teardown: a process group
    # that the model still holds is torn down there, and can abort the rank.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _install_spawn_probe(state: RankState, warm: bool) -> None:
    import torch
    import torch.multiprocessing as mp

    spawn_module = sys.modules["torch.multiprocessing.spawn"]
    original_start, original_join = spawn_module.start_processes, spawn_module.ProcessContext.join

    def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        state.record("spawn_called", nprocs=nprocs, start_method=str(start_method), gpus=torch.cuda.device_count())
        if not isinstance(nprocs, int) or not 1 <= nprocs <= MAX_OWN_LAUNCHER_RANKS:
            state.record("spawn_refused", nprocs=nprocs)
            raise StudentError(
                f"Your launcher asked for nprocs={nprocs!r} processes; the grader runs 1 to {MAX_OWN_LAUNCHER_RANKS}.",
                "Start world_size processes, with world_size a number of 1 or more.",
            )
        method = "forkserver" if warm and start_method == "spawn" else start_method  # the same semantics, warm
        return original_start(_rank_with_probes, (fn, tuple(args), nprocs), nprocs, join, daemon, method)

    def join(self, timeout=None, grace_period=None):
        try:
            finished = original_join(self, timeout, grace_period)
        except Exception as error:
            state.record("spawn_joined", error=f"{type(error).__name__}: {error}"[:2000])
            raise
        if finished:
            state.record("spawn_joined", error="")
        return finished

    spawn_module.start_processes = mp.start_processes = start_processes
    spawn_module.ProcessContext.join = join


def run(spec: RankSpec, warm: bool = False) -> None:
    """The student's file as `python FILE`. warm: this process was forked with
    torch imported and no computation run, so it may fork a spawn server."""
    # The launcher kills this process's group: the ranks the student started are in it.
    isolate(spec)
    state = open_channels(spec, 0)
    enter_sandbox(spec, 0, state)
    prepare_environment(spec)  # `python FILE` is not torchrun
    os.environ[SPEC_VARIABLE] = spec.to_json()
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HOOK_DIR, os.environ.get("PYTHONPATH")) if p)
    failed, error_text = False, ""
    if warm:
        warm_spawn.start_server(guard_spawned_rank)
    try:
        _install_spawn_probe(state, warm)
        runpy.run_path(spec.module_path, run_name="__main__")
    except SystemExit as error:
        failed = error.code not in (None, 0)
        error_text = f"SystemExit: {error.code}" if failed else ""
    except BaseException as error:
        failed = True
        error_text = error.message if isinstance(error, StudentError) else f"{type(error).__name__}: {error}"
    finally:
        state.record("launcher_done", failed=failed, error=error_text[:2000])
        state.close()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    # Run the module under its own name, not as __main__: the student's file
    # becomes __main__, and the ranks must find _rank_with_probes by its name.
    from autograder.rank.own_launcher import run as run_imported

    with open(sys.argv[1]) as spec_file:
        run_imported(RankSpec.from_json(spec_file.read()))

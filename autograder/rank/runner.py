"""What runs inside each rank: isolate the process, install the probes,
import the submission and call its main(rank, world_size)."""

from __future__ import annotations

import faulthandler
import importlib.util
import inspect
import math
import multiprocessing
import os
import sys
import traceback

from .._process import die_with_parent
from . import probes, sandbox_entry
from .probes.state import RankState, StudentError
from .spec import STACK_SIGNAL, RankSpec

MODULE_NAME = "submission"

# What torchrun (and Slurm's torch wrappers) tell a rank through its
# environment. mp.spawn tells it nothing: the rank is main's first argument.
# A rank must see what the student's launcher gives, so a submission that
# reads os.environ["RANK"] fails here as it would under its own mp.spawn.
TORCHRUN_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
)


def isolate(spec: RankSpec) -> None:
    """Own process group (so the launcher can kill the rank and all it started),
    death with the launcher, and none of the launcher's pipe ends."""
    os.setpgid(0, 0)
    die_with_parent()
    for fd in spec.inherited_fds:
        try:
            os.close(fd)
        except OSError:
            pass


def enter_sandbox(spec: RankSpec, rank: int, state: RankState) -> None:
    """Into the run's sandbox, if it has one; a rank that cannot get in never runs student code."""
    if spec.sandbox is None:
        return
    try:
        sandbox_entry.enter(spec.sandbox, rank, spec.workdir)
    except OSError as error:
        state.record(
            "error",
            type="OSError",
            from_grader=True,
            message=f"The grader could not put rank {rank} in its sandbox ({error}).",
            hint="This is a problem of the grading machine; tell your instructor.",
            frames=[],
        )
        state.record("rank_done", failed=True)
        os._exit(1)


def redirect_output(path: str) -> None:
    """Both fds 1 and 2 go to the grader's pipe: C++ warnings too."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # the launcher's pipe, or a plain file
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # Line-buffered, so a rank that is killed has shown all it printed.
    sys.stdout = open(1, "w", buffering=1, errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, errors="replace", closefd=False)


def _share_cores(world_size: int) -> None:
    """As torchrun does: ranks on one machine share its cores, rather than
    each starting a thread per core and all of them fighting over the cores."""
    if "OMP_NUM_THREADS" not in os.environ:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))


def fresh_numpy_seed() -> None:
    """A forked rank inherits NumPy's random state; a process of the student's
    own mp.spawn would get a fresh one. Python's random reseeds itself on fork."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _own_multiprocessing() -> None:
    """A forked rank inherits multiprocessing's start method (the fork
    server's) and temporary folder from the grader, places the sandbox
    hides: a DataLoader's workers would fail to start or to hand back their
    batches. A rank of the student's own mp.spawn has the platform's default
    start method and makes its own folder: so does this one."""
    multiprocessing.set_start_method(None, force=True)
    multiprocessing.current_process()._config.pop("tempdir", None)


def _import_submission(spec: RankSpec):
    module_spec = importlib.util.spec_from_file_location(MODULE_NAME, spec.module_path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[MODULE_NAME] = module  # so pickle finds the student's classes
    module_spec.loader.exec_module(module)
    return module


def _entry_point(module):
    main = getattr(module, "main", None)
    if not callable(main):
        raise StudentError(
            "No function main(rank, world_size) was found.",
            "The grader calls main(rank, world_size) in every rank: define it at the top level.",
        )
    try:
        inspect.signature(main).bind(0, 1)
    except TypeError:
        raise StudentError(
            f"main{inspect.signature(main)} cannot be called as main(rank, world_size).",
            "Give it exactly those two parameters.",
        ) from None
    return main


def _student_frames(error: BaseException, module_path: str) -> list[dict]:
    frames = traceback.extract_tb(error.__traceback__)
    return [
        {"file": os.path.basename(f.filename), "line": f.lineno, "function": f.name, "code": f.line}
        for f in frames
        if os.path.realpath(f.filename) == os.path.realpath(module_path)
    ]


def _record_error(state: RankState, error: BaseException, spec: RankSpec) -> None:
    state.record(
        "error",
        type=type(error).__name__,
        # A refusal by the grader is written for the student already: no exception name, its own hint.
        from_grader=isinstance(error, StudentError),
        message=(error.message if isinstance(error, StudentError) else str(error))[:4000],
        hint=error.hint if isinstance(error, StudentError) else "",
        frames=_student_frames(error, spec.module_path),
    )


def open_channels(spec: RankSpec, rank: int, role: str = "rank") -> RankState:
    """The rank's output, stack dump and records go to the launcher: opened
    before the sandbox, which hides the launcher's files."""
    redirect_output(spec.output_paths[rank])
    stack_file = open(spec.stack_paths[rank], "w")
    faulthandler.enable(stack_file)  # a segfault still leaves a stack
    faulthandler.register(STACK_SIGNAL, stack_file, all_threads=False)
    return RankState(
        rank=rank,
        world_size=spec.world_size,
        backend=spec.backend,
        store_path=spec.store_path,
        workdir=spec.workdir,
        channel_path=spec.channel_path,
        is_notebook=spec.is_notebook,
        role=role,
        evaluation=spec.evaluation,
    )


def prepare_environment(spec: RankSpec) -> None:
    """What the student's own launcher would give the process, and no more."""
    for name in TORCHRUN_VARIABLES:
        os.environ.pop(name, None)
    if spec.hide_gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.chdir(spec.workdir)
    sys.path.insert(0, spec.source_dir)
    sys.argv = [spec.module_path]


def run_rank(rank: int, spec: RankSpec) -> None:
    isolate(spec)
    state = open_channels(spec, rank)
    enter_sandbox(spec, rank, state)
    _share_cores(spec.world_size)
    fresh_numpy_seed()
    _own_multiprocessing()
    prepare_environment(spec)
    installed = probes.install(state)

    def call_main():
        returned = _entry_point(_import_submission(spec))(rank, spec.world_size)
        state.record("main_returned", value=state.guarded(_number, returned))

    run_to_the_end(state, spec, call_main, installed)


def _number(value) -> float | None:
    """What main returned, as a number, if it is one (a Python or NumPy number, or a one-element tensor)."""
    if isinstance(value, (bool, str, bytes)):
        return None
    try:
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


def run_to_the_end(state: RankState, spec: RankSpec, student_code, installed: list[probes.Probe]) -> None:
    """Run the student's code, record how it ended, and end the process."""
    failed = False
    try:
        student_code()
    except SystemExit as error:
        if error.code not in (None, 0):
            failed = True
            _record_error(state, error, spec)
    except BaseException as error:
        failed = True
        _record_error(state, error, spec)
    finally:
        probes.finish(installed)
        state.record("rank_done", failed=failed)
        state.close()
        sys.stdout.flush()
        sys.stderr.flush()
    # Skip interpreter teardown: atexit hooks of student code or a
    # half-closed communicator must not keep a finished rank alive.
    os._exit(1 if failed else 0)

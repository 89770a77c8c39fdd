"""Launch, the parent side: start a run's ranks, watch them against the
deadline, and leave no process behind.

A launcher is given a `Job` (what to run) and a private folder, lays out the
run's own files there (the rendezvous store, the records socket, each rank's
output) and returns a `LaunchResult` (autograder/schema/run.py, where the
judge and the reports read it): each rank's records, and what it saw of the
run from outside. Every launcher follows one skeleton (skeleton.py) and
writes only how its processes start: local.py (torch.multiprocessing),
process.py (a command per rank), own.py (the student's own launcher) and
torchrun.py (torchrun's agents, three launches for one grading).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from ..schema.run import DEFAULT_LIMITS, Limits


@dataclass(frozen=True, kw_only=True)
class Job:
    """What to run, and under which rules; nothing about how ranks start."""

    world_size: int
    backend: str  # resolved: "gloo" or "nccl"
    hide_gpus: bool  # a gloo run on a GPU machine: ranks see no GPU
    timeout_s: float
    module_path: Path  # the submission, as the ranks import it
    workdir: Path  # the ranks' working folder; files left here were written by them
    is_notebook: bool
    # This process has run no torch computation, so ranks may fork from it.
    fork_from_here: bool = False
    sandboxed: bool = False  # the ranks run in the run's sandbox (sandbox.py)
    limits: Limits = DEFAULT_LIMITS
    evaluation: str = ""  # the test set the grader evaluates the final model on (probes/evaluation.py); "": none


# kind -> "module:class", imported on use: the local launchers import torch.
LAUNCHERS = {
    "mp": "autograder.launch.local:MultiprocessingLauncher",
    "process": "autograder.launch.process:ProcessLauncher",
    "torchrun": "autograder.launch.torchrun:TorchrunLauncher",
}


def launcher(kind: str):
    """A launcher of this kind: an object whose launch(job, private_dir) returns the LaunchResult."""
    module, _, name = LAUNCHERS[kind].partition(":")
    return getattr(import_module(module), name)()

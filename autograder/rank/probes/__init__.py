"""Probes run inside each rank and record what the student's code really did.

Each probe wraps one piece of torch (a function, a method, a hook) so that the
student's call still happens, and sends a fact down the rank's records
channel (a socket to the grader, launch/channel.py). Probes never decide
anything; the checks do that from the records.
"""

from . import checkpoint, ddp, files, gradients, inputs, process_group, sampler, snapshot, spawn_guard, training
from .state import RankState

PROBES = (process_group, sampler, inputs, ddp, gradients, training, checkpoint, snapshot, files, spawn_guard)


def install(state: RankState) -> None:
    for probe in PROBES:
        probe.install(state)


def finish(state: RankState) -> None:
    """Called once main has returned (or failed): record end-of-run facts."""
    for probe in PROBES:
        finisher = getattr(probe, "finish", None)
        if finisher is not None:
            state.guarded(finisher, state)

"""Probes run inside each rank and record what the student's code really did.

Each probe wraps one piece of torch (a function, a method, a hook) so that the
student's call still happens, and sends a fact down the rank's records
channel (a socket to the grader, launch/channel.py). Probes never decide
anything; the checks do that from the records.
"""

from .checkpoint import CheckpointProbe
from .ddp import DdpProbe
from .evaluation import EvaluationProbe
from .files import FilesProbe
from .gradients import GradientsProbe
from .inputs import InputsProbe
from .process_group import ProcessGroupProbe
from .sampler import SamplerProbe
from .snapshot import SnapshotProbe
from .spawn_guard import SpawnGuardProbe
from .state import Probe, RankState
from .training import TrainingProbe


def install(state: RankState) -> list[Probe]:
    """Every probe, installed in this order (a later one wraps what an earlier
    one wrapped); the list is what finish() is given."""
    gradients, checkpoint = GradientsProbe(state), CheckpointProbe(state)
    probes = [
        ProcessGroupProbe(state),
        SamplerProbe(state),
        InputsProbe(state),
        DdpProbe(state),
        gradients,
        TrainingProbe(state, gradients),
        checkpoint,
        SnapshotProbe(state, checkpoint),
        FilesProbe(state),
        SpawnGuardProbe(state),
        EvaluationProbe(state),
    ]
    for probe in probes:
        probe.install()
    return probes


def finish(probes: list[Probe]) -> None:
    """Called once main has returned (or failed): record end-of-run facts."""
    for probe in probes:
        probe.state.guarded(probe.finish)

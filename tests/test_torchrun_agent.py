"""The grader's torchrun agent reads what workers can write only as what it
should be: the rendezvous state in the store the workers share with it is
unpickled as that state, never as code (autograder/rank/torchrun_agent.py).
And how a worker ended is what the agent saw (autograder/launch/torchrun.py)."""

from __future__ import annotations

import io
import os
import pickle
import signal
from datetime import UTC, datetime

import pytest
from torch.distributed.elastic.rendezvous import dynamic_rendezvous

from autograder.launch.torchrun import _worker_status
from autograder.rank.torchrun_agent import RendezvousStateOnly
from autograder.schema.run import RankStatus


def _loaded(data: bytes):
    return RendezvousStateOnly(io.BytesIO(data)).load()


def test_the_rendezvous_state_torchrun_writes_is_read_back():
    state = dynamic_rendezvous._RendezvousState()
    node = dynamic_rendezvous._NodeDesc("127.0.0.1", 4242, 0)
    state.participants[node] = 0
    state.wait_list.add(node)
    state.last_heartbeats[node] = datetime.now(UTC)
    state.deadline = datetime.now(UTC)
    loaded = _loaded(pickle.dumps(state))
    assert loaded.participants == {node: 0} and loaded.last_heartbeats == state.last_heartbeats


class RunsCode:
    def __reduce__(self):
        return os.system, ("echo the agent ran a worker's code",)


def test_a_state_that_would_run_code_is_refused():
    with pytest.raises(pickle.UnpicklingError, match="posix.system is not part of a rendezvous state"):
        _loaded(pickle.dumps(RunsCode()))


@pytest.mark.parametrize(
    ("exit_code", "faulted", "hung", "status"),
    [
        (0, False, False, RankStatus.FINISHED),
        (3, False, False, RankStatus.FAILED),  # whatever its records said before it exited
        (-signal.SIGSEGV, False, False, RankStatus.FAILED),
        (-signal.SIGKILL, True, False, RankStatus.STOPPED),  # the grader's fault
        (-signal.SIGTERM, False, False, RankStatus.STOPPED),  # stopped by the agent when another worker failed
        (None, False, True, RankStatus.HUNG),  # still running at the deadline
        (None, False, False, RankStatus.STOPPED),
    ],
)
def test_a_worker_ended_as_its_agent_saw_it(exit_code, faulted, hung, status):
    assert _worker_status(exit_code, faulted, hung) == status

"""One node's torchrun agent, as the grader starts it:

    python -m autograder.rank.torchrun_agent PLAN NODE

It enters the run's sandbox as slot NODE, then runs torchrun's own agent
(torch.distributed.run): the agent starts the workers, watches them, and
restarts them all when one dies. Each worker runs
autograder.rank.torchrun_worker, which installs the probes and runs the
student's file as `python FILE` would. The workers are forked from a
template of the agent (worker_template.py) that puts each in a sandbox slot
of its own; on CPU the template has imported torch and the worker is not
exec'd: the same process, seconds sooner.

How each worker ended is the agent's to say, not the worker's: once torchrun
is done, the agent records every worker's exit status as it reaped it
(`worker_exit`), on a records stream it opened before any worker started.
The workers (the same user) cannot trace the agent, and the one thing of
theirs it reads that could carry code, the rendezvous state in the store
they share (torchrun pickles it), is read as rendezvous state and nothing else.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import types

from torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler import SubprocessHandler

from .._process import out_of_reach
from .runner import TORCHRUN_VARIABLES, enter_sandbox, isolate, open_channels
from .spec import PLAN_VARIABLE, SLOT_VARIABLE, TorchrunPlan

MONITOR_INTERVAL_S = "0.1"  # how often the agent looks at its workers: a lost worker is seen at once


class WorkerExits:
    """Every worker the agent started (its attempt, its global rank, its
    process), for their exit statuses once the agent is done."""

    def __init__(self):
        self.started: list[tuple[int, int, object]] = []

    def install(self) -> None:
        original_popen, started = SubprocessHandler._popen, self.started

        def _popen(self, args, env):
            process = original_popen(self, args, env)
            started.append((int(env.get("TORCHELASTIC_RESTART_COUNT", "0")), int(env["RANK"]), process))
            return process

        SubprocessHandler._popen = _popen

    def record(self, state) -> None:
        for attempt, rank, process in self.started:
            state.record("worker_exit", attempt=attempt, worker=rank, exit_code=process.poll())


def _start_workers_from_a_template(plan: TorchrunPlan) -> None:
    """Workers forked from a template of this process (worker_template.py):
    warm, where the template has imported what each fresh worker would import
    again; in the sandbox, each in a slot of its own, signalled through the
    template."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    from .worker_template import WorkerTemplate

    if plan.warm_workers:
        import torch._dynamo  # noqa: F401  (DDP's constructor imports it)

        from . import torchrun_worker  # noqa: F401  (and with it the probes)

    template = WorkerTemplate(plan.spec.sandbox, plan.spec.workdir)

    def _popen(self, args, env):
        slot = plan.worker_slot(int(env["RANK"])) if plan.worker_slots else None
        if slot is not None:
            env = {**env, SLOT_VARIABLE: str(slot)}
        return template.start(args, env, self._stdout, self._stderr, slot, fresh=not plan.warm_workers)

    def close(self, death_sig=None):
        self.proc.send_signal(death_sig or subprocess_handler._get_default_signal())
        for output in (self._stdout, self._stderr):
            if output is not None:
                output.close()

    SubprocessHandler._popen, SubprocessHandler.close = _popen, close


class RendezvousStateOnly(pickle.Unpickler):
    """Unpickles torchrun's rendezvous state, and refuses any other class or
    function: a worker may write that state, and a pickle can run code."""

    ALLOWED = {
        ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_RendezvousState"),
        ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_NodeDesc"),
        ("datetime", "datetime"),
        ("datetime", "timezone"),
        ("datetime", "timedelta"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a rendezvous state")
        return super().find_class(module, name)


def _read_rendezvous_state_only() -> None:
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def loads(data: bytes):
        return RendezvousStateOnly(io.BytesIO(data)).load()

    dynamic_rendezvous.pickle = types.SimpleNamespace(dumps=pickle.dumps, loads=loads, PickleError=pickle.PickleError)


def torchrun_arguments(plan: TorchrunPlan, node: int) -> list[str]:
    """torchrun's command line for this node. A c10d rendezvous on the loopback,
    hosted by node 0, as `torchrun --nnodes N --rdzv-endpoint HOST:PORT` on a cluster."""
    return [
        f"--nnodes={plan.nodes}",
        f"--nproc-per-node={plan.workers_per_node}",
        f"--max-restarts={plan.max_restarts}",
        f"--monitor-interval={MONITOR_INTERVAL_S}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{plan.rendezvous_port}",
        "--rdzv-id=grading",
        f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}",
        "--local-addr=127.0.0.1",
        "--module",
        "autograder.rank.torchrun_worker",
    ]


def run(plan: TorchrunPlan, node: int) -> None:
    spec = plan.spec
    isolate(spec)  # the grader kills this process's group; the workers die with it
    state = open_channels(spec, node)
    if plan.warm_workers or plan.worker_slots:  # before the sandbox: the template puts each worker in its slot
        _start_workers_from_a_template(plan)
    enter_sandbox(spec, node, state)
    out_of_reach()  # the workers, the same user, cannot write on its records stream
    _read_rendezvous_state_only()
    exits = WorkerExits()
    exits.install()
    for name in (*TORCHRUN_VARIABLES, "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    os.environ[PLAN_VARIABLE] = plan.to_json()
    os.environ[SLOT_VARIABLE] = str(node)  # a worker's, unless it has a slot of its own
    os.chdir(spec.workdir)
    from torch.distributed.run import main as torchrun

    code = 0
    try:
        torchrun(torchrun_arguments(plan, node))
    except SystemExit as error:
        code = 0 if error.code in (None, 0) else 1
    except BaseException:  # ChildFailedError: the workers failed on every attempt
        code = 1
    exits.record(state)
    state.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    with open(sys.argv[1]) as plan_file:
        run(TorchrunPlan.from_json(plan_file.read()), int(sys.argv[2]))

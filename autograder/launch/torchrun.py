"""The torchrun launcher: workers started by torchrun's own agent
(torch.distributed.run), as `torchrun --nproc-per-node N FILE` starts them.

Grading a torchrun program takes three jobs, all within the one deadline:
- reference: one node, no fault. Its workers are the graded ranks (weights,
  logs, clean-up), and its final weights are what the faulted job must reach;
- faulted: one node, --max-restarts 1, and one worker killed with SIGKILL
  partway through the first attempt: the agent restarts every worker and the
  program must resume;
- two_node: two agents (--nnodes 2, a c10d rendezvous on the loopback), one
  worker each, so a worker's global rank and its local rank differ.
The faulted and two-node jobs each run in a run folder of their own, with
copies of the code and of the working folder made before anything runs, so
no job finds (or, in the sandbox, sees) another's snapshot. The agent of each
node is one sandbox slot, and each worker has a slot of its own after theirs
(worker_template.py), so the sandbox names the worker that wrote a file. On
CPU the agents are forked warm, as the graded ranks are, and so are the
workers; on a GPU both are commands, as CUDA needs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch.multiprocessing as mp

from ..rank import torchrun_agent
from ..rank.spec import TorchrunPlan
from ..schema.run import LaunchResult, RankOutcome, RankStatus
from . import Job
from .capture import CappedOutput
from .contain import Containment
from .local import forked_fds, start_method, started_process
from .skeleton import Launch, Launcher
from .supervise import StartedRank, start_command

FAULT_AFTER_PASSES = 2  # the fault comes in the third epoch, once two snapshots could be written


@dataclass(frozen=True)
class TorchrunJob:
    name: str
    nodes: int
    max_restarts: int = 0
    fault: bool = False


JOBS = (TorchrunJob("reference", 1), TorchrunJob("faulted", 1, 1, True), TorchrunJob("two_node", 2))


def _free_port() -> int:
    """A port for node 0's rendezvous. In the sandbox the run has a network of
    its own, where any port is free; without it, one the machine is not using."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _worker_output(path: str) -> CappedOutput:
    capture = CappedOutput(path)
    os.chmod(path, 0o666)  # the workers run as the sandbox's users
    return capture


def _worker_status(exit_code: int | None, faulted: bool, hung: bool) -> RankStatus:
    """How a worker ended, by its exit status as its agent reaped it."""
    if exit_code is None:  # the agent did not see it end: still running at the deadline, or the agent was killed
        return RankStatus.HUNG if hung else RankStatus.STOPPED
    if exit_code == 0:
        return RankStatus.FINISHED
    if exit_code == -signal.SIGKILL and faulted:
        return RankStatus.STOPPED  # the grader's fault
    if exit_code in (-signal.SIGTERM, -signal.SIGKILL):  # the agent stopped it when another worker failed
        return RankStatus.STOPPED
    return RankStatus.FAILED


def _worker_outcome(
    rank: int, events: list, exit_code: int | None, faulted: bool, capture: CappedOutput, hung: bool
) -> RankOutcome:
    done = next((e for e in events if isinstance(e, dict) and e.get("kind") == "rank_done"), None)
    return RankOutcome(
        rank=rank,
        exit_code=exit_code,
        status=_worker_status(exit_code, faulted, hung),
        output=capture.text(),
        output_bytes=capture.total_bytes,
        exited_at=done.get("time") if done else None,
        lines=capture.tally.summary(),
    )


def _worker_exits(channel, nodes: int) -> dict[tuple[int, int], int | None]:
    """(attempt, rank) -> the worker's exit status, from its agent's records."""
    exits = {}
    for node in range(nodes):
        for e in channel.events("rank", node):
            if isinstance(e, dict) and e.get("kind") == "worker_exit":
                exits[e.get("attempt"), e.get("worker")] = e.get("exit_code")
    return {place: code for place, code in exits.items() if isinstance(code, int) or code is None}


def _workers(agents: LaunchResult, containment: Containment, plan: TorchrunPlan, outputs: dict) -> LaunchResult:
    """The agents' run, seen as its workers: every attempt's records and outcomes."""
    channel = containment.channel

    def streams(attempt: int) -> list[list]:
        # A worker's slot is its own, or its node's: the rendezvous numbers the nodes in the
        # order they join, so any node's worker may be any rank.
        def slots(rank: int):
            return [plan.worker_slot(rank)] if plan.worker_slots else range(plan.nodes)

        return [
            next((events for s in slots(r) if (events := channel.events(f"worker{attempt}@{s}", r))), [])
            for r in range(plan.world_size)
        ]

    tried = [a for a in range(plan.max_restarts + 1) if any(streams(a))] or [0]
    attempts = [streams(a) for a in range(tried[-1] + 1)]
    hung = bool(agents.hung)
    exits = _worker_exits(channel, plan.nodes)
    outcomes = [
        [
            _worker_outcome(r, events, exits.get((a, r)), (a, r) == (0, plan.fault_rank), outputs[a, r], hung)
            for r, events in enumerate(streams_of_attempt)
        ]
        for a, streams_of_attempt in enumerate(attempts)
    ]
    last = outcomes[-1]
    failed = [o for o in last if o.status == RankStatus.FAILED]
    evidence = agents.evidence
    evidence.joined = None  # torchrun's agent holds the rendezvous, not the grader's store
    if plan.worker_slots:  # each worker a slot of its own, after the agents'
        evidence.written_by = {name: _worker_ranks(plan, slots) for name, slots in evidence.written_by.items()}
        evidence.over_memory = _worker_ranks(plan, evidence.over_memory)
    return LaunchResult(
        ranks=last,
        duration_s=agents.duration_s,
        records=attempts[-1],
        first_failure=min(failed, key=lambda o: o.exited_at or float("inf")).rank if failed else None,
        hung=[o.rank for o in last if o.status == RankStatus.HUNG],
        start_error=agents.start_error,
        evidence=evidence,
        intrusions=agents.intrusions,
        attempts=attempts,
        attempt_outcomes=outcomes,
        agents=agents.ranks,
    )


def _warm(job: Job) -> bool:
    """Agents forked and workers forked from a template of theirs: all but a CUDA run."""
    return start_method(job) != "spawn"


def _worker_ranks(plan: TorchrunPlan, slots: list[int]) -> list[int]:
    """The workers' ranks of sandbox slots; an agent's slot names none."""
    return sorted(slot - plan.nodes for slot in slots if slot >= plan.nodes)


class TorchrunJobLauncher(Launcher):
    """One of the grading's jobs: an agent per node, whose workers are the ranks."""

    drains_after_start = True  # its agents may be forked

    def __init__(self, torchrun_job: TorchrunJob):
        self.torchrun_job = torchrun_job
        self.plan: TorchrunPlan | None = None
        self.worker_outputs: dict[tuple[int, int], CappedOutput] = {}

    def _workers_per_node(self, job: Job) -> int:
        return job.world_size if self.torchrun_job.nodes == 1 else 1

    def slots(self, job: Job) -> Job:
        """A sandbox slot per node, and in the sandbox one per worker (TorchrunPlan)."""
        nodes = self.torchrun_job.nodes
        workers = nodes * self._workers_per_node(job) if job.sandboxed else 0
        return replace(job, world_size=nodes + workers)

    def output_names(self, slots: Job) -> list[str]:
        return [f"agent{n}.out" for n in range(self.torchrun_job.nodes)]

    def prepare(self, launch: Launch) -> None:
        nodes = self.torchrun_job.nodes
        workers = self._workers_per_node(launch.job)
        self.plan = plan = TorchrunPlan(
            launch.spec,
            nodes,
            workers,
            self.torchrun_job.max_restarts,
            _free_port(),
            str(launch.containment.layout.channel_dir),  # the one folder of the run's that its users may open
            nodes * workers - 1 if self.torchrun_job.fault else None,  # not rank 0: the writer of the snapshots
            FAULT_AFTER_PASSES,
            warm_workers=_warm(launch.job),
        )
        self.worker_outputs = {
            (a, r): _worker_output(plan.worker_output(a, r))
            for a in range(plan.max_restarts + 1)
            for r in range(plan.world_size)
        }
        launch.more_outputs = list(self.worker_outputs.values())
        (launch.private_dir / "plan.json").write_text(plan.to_json())

    def inherited_fds(self, slots: Job, containment: Containment, outputs: list[CappedOutput]) -> list[int]:
        return forked_fds(slots, containment, outputs)

    def start(self, launch: Launch, started: list[StartedRank]) -> None:
        """Each agent as the graded ranks start: forked warm on CPU, a command of its own for a CUDA run."""
        warm, plan_path = _warm(launch.job), launch.private_dir / "plan.json"
        for node, output in enumerate(launch.outputs):
            if warm:
                agent = mp.get_context(start_method(launch.job)).Process(
                    target=torchrun_agent.run, args=(self.plan, node)
                )
                agent.start()
                started.append(started_process(agent))
            else:
                argv = [sys.executable, "-m", "autograder.rank.torchrun_agent", str(plan_path), str(node)]
                started.append(start_command(argv, output.path))

    def result(self, launch: Launch, supervised: LaunchResult) -> LaunchResult:
        return _workers(supervised, launch.containment, self.plan, self.worker_outputs)


def _finished(result: LaunchResult) -> bool:
    return not result.start_error and all(o.status == RankStatus.FINISHED for o in result.ranks)


class TorchrunLauncher:
    """Three launches of the skeleton, one per job."""

    kind = "torchrun"

    def launch(self, job: Job, private_dir: Path) -> LaunchResult:
        """The reference job's result, with the other jobs' in `jobs`. They run
        only after the reference finished: a program that fails without a fault fails the same way with one."""
        deadline = time.monotonic() + job.timeout_s
        others = {torchrun_job.name: _run_folder(job) for torchrun_job in JOBS[1:]}
        try:
            private_dir.mkdir(exist_ok=True)
            reference = TorchrunJobLauncher(JOBS[0]).launch(job, private_dir / JOBS[0].name)
            for torchrun_job in JOBS[1:] if _finished(reference) else ():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                other = replace(others[torchrun_job.name], timeout_s=remaining)
                private = other.workdir.parent / "private"
                reference.jobs[torchrun_job.name] = TorchrunJobLauncher(torchrun_job).launch(other, private)
            return reference
        finally:
            for other in others.values():
                shutil.rmtree(other.workdir.parent, ignore_errors=True)


def _run_folder(job: Job) -> Job:
    """The job in a run folder of its own, with copies of its code and its working folder."""
    root = Path(tempfile.mkdtemp(prefix="ddp-grade-torchrun-"))
    code = Path(job.module_path).parent
    shutil.copytree(code, root / "code", symlinks=True)
    shutil.copytree(job.workdir, root / "work", symlinks=True)
    return replace(job, module_path=root / "code" / Path(job.module_path).name, workdir=root / "work")

"""What runs in each worker that torchrun's agent starts: the probes, then
the student's file as `python FILE` (torchrun's own way to run a script).

The worker takes its rank from torchrun's environment, as the student's
code must. Its records go to the grader's channel as attempt A's worker of
that rank, so a restarted worker's records are kept apart from the first
attempt's. On the attempt chosen by the plan, one worker is killed with
SIGKILL partway through: a real fault, which torchrun answers by
restarting every worker.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys

from torch.optim.optimizer import register_optimizer_step_post_hook

from .._process import die_with_parent
from . import probes
from .probes.state import RankState
from .runner import redirect_output, run_to_the_end
from .spec import PLAN_VARIABLE, SLOT_VARIABLE, TorchrunPlan


def _arm_fault(state: RankState, passes: int) -> None:
    """SIGKILL this worker at its first optimizer step after `passes` whole passes over the data."""

    def after_step(*_args):
        if state.passes_finished >= passes:
            state.record("fault_injected", passes=passes)
            os.kill(os.getpid(), signal.SIGKILL)

    register_optimizer_step_post_hook(after_step)


def run(plan: TorchrunPlan) -> None:
    die_with_parent()  # the agent starts workers in sessions of their own
    rank, attempt = int(os.environ["RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    slot = int(os.environ[SLOT_VARIABLE])  # its sandbox slot: its own, or its agent's
    spec = plan.spec
    redirect_output(plan.worker_output(attempt, rank))
    state = RankState(
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
        backend=spec.backend,
        store_path="",
        workdir=spec.workdir,
        channel_path=spec.channel_path,
        is_notebook=spec.is_notebook,
        role=f"worker{attempt}@{slot}",
        launcher="torchrun",
    )
    state.record(
        "torchrun_worker",
        attempt=attempt,
        node=int(os.environ["GROUP_RANK"]),
        local_rank=int(os.environ["LOCAL_RANK"]),
        world_size=state.world_size,
    )
    if spec.hide_gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.chdir(spec.workdir)
    sys.path.insert(0, spec.source_dir)
    sys.argv = [spec.module_path]
    installed = probes.install(state)
    if plan.fault_rank == rank and attempt == 0:
        _arm_fault(state, plan.fault_after_passes)
    run_to_the_end(state, spec, lambda: runpy.run_path(spec.module_path, run_name="__main__"), installed)


def main() -> None:
    """`python -m autograder.rank.torchrun_worker`, or a worker forked warm (worker_template.py)."""
    run(TorchrunPlan.from_json(os.environ.pop(PLAN_VARIABLE)))


if __name__ == "__main__":
    main()

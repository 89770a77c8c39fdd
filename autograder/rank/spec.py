"""The contract between a launcher and its ranks: what a rank needs to know.

A plain, JSON-able record, so it crosses a fork, a spawn or a command line.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from ..schema.run import SandboxView

STACK_SIGNAL = signal.SIGUSR1  # a rank's faulthandler dumps its Python stack on this


@dataclass(frozen=True)
class RankSpec:
    world_size: int
    backend: str
    hide_gpus: bool
    is_notebook: bool
    module_path: str
    workdir: str
    store_path: str  # the rendezvous, owned by the launcher
    channel_path: str  # the socket the ranks send their records to
    output_paths: tuple[str, ...]
    stack_paths: tuple[str, ...]
    inherited_fds: tuple[int, ...] = ()  # the launcher's pipe ends, closed in forked ranks
    sandbox: SandboxView | None = None  # where the ranks join the run's sandbox; None: they run as the grader
    evaluation: str = ""  # the test set the grader evaluates the final model on; "": none

    @property
    def source_dir(self) -> str:
        return str(Path(self.module_path).parent)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RankSpec:
        data = json.loads(text)
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        if fields.get("sandbox") is not None:
            view = fields["sandbox"]
            tuples = {name: tuple(view[name]) for name in ("memory_cgroups", "mount_namespaces")}
            fields["sandbox"] = SandboxView(**(view | tuples))
        return cls(**fields)

    @classmethod
    def for_run(cls, job, private_dir: Path, containment, output_paths, inherited_fds=()) -> RankSpec:
        """The layout every local launcher uses: one private folder per run."""
        ranks = range(job.world_size)
        return cls(
            world_size=job.world_size,
            backend=job.backend,
            hide_gpus=job.hide_gpus,
            is_notebook=job.is_notebook,
            module_path=str(job.module_path),
            workdir=str(job.workdir),
            store_path=containment.store_path,
            channel_path=containment.channel.path,
            output_paths=tuple(str(p) for p in output_paths),
            stack_paths=tuple(str(private_dir / f"rank{r}.stack") for r in ranks),
            inherited_fds=tuple(inherited_fds),
            sandbox=containment.sandbox_view,
            evaluation=job.evaluation,
        )


PLAN_VARIABLE = "DDP_GRADER_TORCHRUN_PLAN"  # the plan, for a torchrun agent's workers
SLOT_VARIABLE = "DDP_GRADER_SLOT"  # a worker's sandbox slot: its own, or its agent's


@dataclass(frozen=True)
class TorchrunPlan:
    """One torchrun job of a grading: its agents (one per node, each a
    sandbox slot of `spec`) and what their workers need to know. Where
    `worker_slots`, each worker has a sandbox slot of its own too, after the
    agents' (worker_slot), so that what it writes is told from its neighbours'."""

    spec: RankSpec  # world_size: the number of sandbox slots
    nodes: int
    workers_per_node: int
    max_restarts: int
    rendezvous_port: int
    output_dir: str  # the workers' output pipes, one per attempt and rank (worker_output)
    fault_rank: int | None = None  # the worker killed on the first attempt, if any
    fault_after_passes: int = 0  # ... at its first optimizer step after this many passes over the data
    warm_workers: bool = False  # forked from a template of the agent (worker_template.py), not exec'd

    @property
    def worker_slots(self) -> bool:
        """Each worker in a sandbox slot of its own: wherever there is a sandbox."""
        return self.spec.sandbox is not None

    def worker_slot(self, rank: int) -> int:
        return self.nodes + rank

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_node

    def worker_output(self, attempt: int, rank: int) -> str:
        return str(Path(self.output_dir) / f"out-a{attempt}-r{rank}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TorchrunPlan:
        data = json.loads(text)
        return cls(**(data | {"spec": RankSpec.from_json(json.dumps(data["spec"]))}))

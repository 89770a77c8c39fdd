"""The checks: each one an id, its points, and a pure function of the run's
records that returns passed, failed (with a hint) or skipped.

One module per family, in the order of the five DDP changes: `lifecycle`
(the process group, its end, the launcher, the GPU), `data` (the sampler),
`model` (DDP and the averaged gradients), `writes` (checkpoints and logs), and
`torchrun` (snapshots and resuming). `registry` holds what they share. Adding
a check is one decorated function in its family's module and its id in
REPORT_ORDER (then its catalogue rows in tests/mistakes.py and a run of
`python -m tools.grade_cells`, which writes its grade cells).
"""

from __future__ import annotations

from . import data, lifecycle, model, torchrun, writes  # noqa: F401 - importing a family registers its checks
from .registry import REGISTERED, Check, by_id, check, run_checks
from .torchrun import TORCHRUN_CHANGE

# The order of the report, of the grade cells and of the exports: roughly the order of the five changes.
REPORT_ORDER = (
    "process_group",
    "distributed_sampler",
    "same_dataset",
    "set_epoch",
    "ddp_wrapped",
    "weights_in_sync",
    "training",
    "rank0_checkpoint",
    "checkpoint_loadable",
    "rank0_logs",
    "cleanup",
    "launcher",
    "gpu_device",
    "torchrun_env",
    "snapshot_rank0",
    "snapshot_contents",
    "resumed",
    "resume_epoch",
    "optimizer_restored",
    "same_result",
)
if set(REPORT_ORDER) != set(REGISTERED) or len(REPORT_ORDER) != len(REGISTERED):
    raise ImportError(f"REPORT_ORDER and the registered checks differ: {set(REPORT_ORDER) ^ set(REGISTERED)}")
CHECKS: list[Check] = [REGISTERED[check_id] for check_id in REPORT_ORDER]

__all__ = ["CHECKS", "REPORT_ORDER", "TORCHRUN_CHANGE", "Check", "by_id", "check", "run_checks"]

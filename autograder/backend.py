"""Choose the backend for a run from what this machine has."""
from __future__ import annotations

import os

from .errors import CannotGrade

BACKENDS = ("auto", "gloo", "nccl")


def visible_gpus() -> int:
    # NVML counts GPUs without initialising CUDA here, so forked ranks stay safe.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve(requested: str, world_size: int) -> tuple[str, bool]:
    """(backend, hide_gpus). nccl needs a GPU per rank: it cannot share one."""
    gpus = visible_gpus()
    if requested == "auto":
        requested = "nccl" if gpus >= world_size else "gloo"
    if requested == "nccl" and gpus < world_size:
        raise CannotGrade(
            f"--backend nccl needs {world_size} GPUs, one per rank, but this machine has {gpus}.",
            f"Use --backend gloo to grade on the CPU{f', or --world-size {gpus}' if gpus else ''}.",
        )
    # A gloo run on a GPU machine hides the GPUs, so device-agnostic code takes its CPU path.
    return requested, requested == "gloo" and gpus > 0

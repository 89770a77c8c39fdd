"""Choose the backend for a run from what this machine has."""

from __future__ import annotations

from ..errors import CannotGrade

BACKENDS = ("auto", "gloo", "nccl")


def visible_gpus() -> int:
    """The GPUs the ranks could use, counted through NVML (honouring
    CUDA_VISIBLE_DEVICES). Never through the CUDA runtime: a process that has
    touched it cannot fork ranks that use CUDA ("Cannot re-initialize CUDA in
    forked subprocess"), even on a machine with no GPU at all."""
    import torch

    if not torch.backends.cuda.is_built():
        return 0
    return max(torch.cuda._device_count_nvml(), 0)  # -1: no driver, so no GPU


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

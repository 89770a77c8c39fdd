"""Hints for errors students commonly meet, matched on the error text."""

from __future__ import annotations

HINTS = (
    (
        "NotImplementedError",
        "This part still raises NotImplementedError: replace `raise NotImplementedError()` with your code.",
    ),
    (
        "Default process group has not been initialized",
        "Create the process group (dist.init_process_group) at the start of main, before the sampler and the "
        "DDP model.",
    ),
    (
        "mutually exclusive with shuffle",
        "Remove shuffle=True from the DataLoader: the DistributedSampler does the shuffling.",
    ),
    (
        "device_ids and output_device arguments only work with",
        "On the CPU, wrap the model without device_ids: DDP(model). Pass device_ids=[rank] only for a model on a GPU.",
    ),
    (
        "Torch not compiled with CUDA",
        "This run has no GPU. Choose the device with torch.cuda.is_available() and fall back to the CPU.",
    ),
    (
        "No CUDA GPUs are available",
        "This run has no GPU. Choose the device with torch.cuda.is_available() and fall back to the CPU.",
    ),
    (
        "Found no NVIDIA driver",
        "This run has no GPU. Choose the device with torch.cuda.is_available() and fall back to the CPU.",
    ),
    (
        "CUDA driver initialization failed",
        "This run has no GPU. Choose the device with torch.cuda.is_available() and fall back to the CPU.",
    ),
    (
        "Expected to have finished reduction in the prior iteration",
        "Some parameters got no gradient: every parameter of the DDP model must take part in the loss.",
    ),
    ("Connection closed by peer", "Another rank stopped first; its error is the one to fix."),
    ("Connection reset by peer", "Another rank stopped first; its error is the one to fix."),
)


def hint_for(error_text: str) -> str:
    for pattern, hint in HINTS:
        if pattern in error_text:
            return hint
    return ""

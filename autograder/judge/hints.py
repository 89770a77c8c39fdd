"""Hints for errors students commonly meet, matched on the error text (which
ends with the student's line of code): the first row whose every piece is
in the text gives the hint."""

from __future__ import annotations

from ..schema.run import Limits

NO_GPU = "This run has no GPU. Choose the device with torch.cuda.is_available() and fall back to the CPU."
ENVIRONMENT_RANK = (
    "Use the rank and world_size that main receives: RANK is set by torchrun, not by mp.spawn, which passes "
    "each process its rank as main's first argument."
)

HINTS: tuple[tuple[str | tuple[str, ...], str], ...] = (
    (("KeyError: 'RANK'",), ENVIRONMENT_RANK),
    (("KeyError: 'LOCAL_RANK'",), ENVIRONMENT_RANK),
    (("KeyError: 'WORLD_SIZE'",), ENVIRONMENT_RANK),
    (
        ("'function' object has no attribute 'state_dict'",),
        "A function has no state_dict: is it model.modules? That is a method of every nn.Module (it lists its "
        "submodules). The model inside DDP is model.module, without the s: model.module.state_dict().",
    ),
    (
        ("Default process group has not been initialized", "DistributedSampler"),
        "DistributedSampler(dataset) without num_replicas and rank asks the process group for them, and there "
        "is none yet: create the process group first, or pass num_replicas=world_size, rank=rank.",
    ),
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
    ("Torch not compiled with CUDA", NO_GPU),
    ("No CUDA GPUs are available", NO_GPU),
    ("Found no NVIDIA driver", NO_GPU),
    ("CUDA driver initialization failed", NO_GPU),
    (
        "Expected to have finished reduction in the prior iteration",
        "Some parameters got no gradient: every parameter of the DDP model must take part in the loss.",
    ),
    (
        "memory limit",
        "Use less memory: keep one copy of the data set per rank, a smaller batch, and no list of every "
        "batch's tensors (store loss.item(), not loss).",
    ),
    (
        "File too large",
        f"The grader lets a rank write files of up to {Limits.file_bytes >> 30} GiB: save the model's state_dict "
        "only, and write logs from rank 0 only.",
    ),
    (
        "Resource temporarily unavailable",
        "The run reached the grader's limit on processes and threads: do not start processes in a loop, and "
        "leave DataLoader's num_workers small.",
    ),
    (
        "Too many open files",
        "A rank may hold a few thousand files open at once: close each file when you are done with it "
        "(a `with open(...)` block does).",
    ),
    (
        "of CPU time",
        "Train for the exercise's epochs only, and check that no loop runs forever.",
    ),
    (
        "can't start new thread",
        "The run reached the grader's limit on processes and threads: do not start threads in a loop.",
    ),
    ("Connection closed by peer", "Another rank stopped first; its error is the one to fix."),
    ("Connection reset by peer", "Another rank stopped first; its error is the one to fix."),
)


def hint_for(error_text: str) -> str:
    for pattern, hint in HINTS:
        pieces = (pattern,) if isinstance(pattern, str) else pattern
        if all(piece in error_text for piece in pieces):
            return hint
    return ""

"""Evidence from outside the ranks: the checkpoints the graded ranks left on
disk, opened by the grader itself once the ranks are gone.

A rank's records say that it called torch.save; only the file says what was
saved. Each candidate (a file with a checkpoint's suffix, or a path a rank
passed to torch.save) is opened with torch.load(weights_only=True), which
runs no code from the file, and looked into for a model's state dict.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".tar", ".bin")
MAX_CHECKPOINT_BYTES = 256 * 2**20  # far more than any exercise's model; beyond it, not opened
MAX_CHECKPOINTS = 20
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # torch's messages embolden some words

# problem -> what it means, for messages
PROBLEMS = {
    "missing": "it is not on disk at the end of the run",
    "outside": "it is outside the run's working folder",
    "empty": "the file is empty",
    "too_large": "the file is too large to be this exercise's model",
    "unreadable": "torch.load cannot open it",
    # A torch file of pickled objects (a whole model, say): torch.save wrote it, but opening it would run
    # code from it, which weights_only=True refuses. checkpoint_loadable says what to save instead.
    "pickled_objects": "it holds pickled Python objects rather than tensors",
    "no_state_dict": "torch.load opens it, but it holds no model state dict",
}


def checkpoint_candidates(workdir: Path, files_left: list[str], saved_paths: list[str]) -> list[str]:
    """Real paths: the new files with a checkpoint's suffix, then torch.save's targets."""
    found = [os.path.realpath(workdir / name) for name in files_left if name.endswith(CHECKPOINT_SUFFIXES)]
    found += [os.path.realpath(p) for p in saved_paths if isinstance(p, str)]
    return list(dict.fromkeys(found))[:MAX_CHECKPOINTS]


def inspect_checkpoint(path: str, workdir: Path) -> dict:
    """{"problem": None or a key of PROBLEMS, "error": text}"""
    import torch

    from .model_state import find_model_state

    root = os.path.realpath(workdir) + os.sep
    if not path.startswith(root):
        return {"problem": "outside", "error": ""}
    if not os.path.isfile(path):
        return {"problem": "missing", "error": ""}
    size = os.path.getsize(path)
    if size == 0 or size > MAX_CHECKPOINT_BYTES:
        return {"problem": "empty" if size == 0 else "too_large", "error": ""}
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # not a torch file, or one that pickles objects
        if _is_torch_archive(path):
            return {"problem": "pickled_objects", "error": ""}
        text = ANSI.sub("", f"{type(error).__name__}: {error}").splitlines()[0]
        return {"problem": "unreadable", "error": text[:300]}
    return {"problem": None if find_model_state(saved) is not None else "no_state_dict", "error": ""}


def is_saved_by_torch(found: dict) -> bool:
    """A file torch.save wrote: a state dict, or pickled objects."""
    return found["problem"] in (None, "pickled_objects")


def _is_torch_archive(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def inspect_checkpoints(workdir: Path, files_left: list[str], saved_paths: list[str]) -> dict[str, dict]:
    return {p: inspect_checkpoint(p, workdir) for p in checkpoint_candidates(workdir, files_left, saved_paths)}

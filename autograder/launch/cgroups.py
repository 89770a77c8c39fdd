"""The run's cgroups (v2, or v1's memory controller): made below the grader's
own, a memory limit per rank and a process limit for the run, and the
counters read back as evidence.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..linux import read_or_empty


def own_cgroup(controller: str) -> Path | None:
    """Where this process may make cgroups of a controller: its v1 folder, or
    the v2 hierarchy's where the controller is enabled there; None if neither."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        folder = (
            Path(f"/sys/fs/cgroup/{controller}") / path.lstrip("/")
            if names
            else Path("/sys/fs/cgroup") / path.lstrip("/")
        )
        if controller in names.split(",") or (
            not names and controller in read_or_empty(f"{folder}/cgroup.subtree_control").split()
        ):
            return folder if os.access(folder, os.W_OK) else None
    return None


def make_cgroup(parent: Path | None, name: str, settings: dict[str, str]) -> str:
    if parent is None:
        return ""
    folder = parent / name
    try:
        folder.mkdir()
        for key, value in settings.items():
            (folder / key).write_text(value)
    except OSError:
        remove_cgroup(str(folder))
        return ""
    return str(folder)


def remove_cgroup(folder: str) -> None:
    if folder:
        try:
            os.rmdir(folder)
        except OSError:
            pass


def counter(text: str, name: str) -> int:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


def memory_settings(parent: Path | None, limit: int) -> dict[str, str]:
    if parent is not None and (parent / "memory.limit_in_bytes").exists():
        return {"memory.limit_in_bytes": str(limit)}
    return {"memory.max": str(limit), "memory.swap.max": "0"}


def oom_kills(folder: str) -> int:
    if not folder:
        return 0
    events = read_or_empty(f"{folder}/memory.events") or read_or_empty(f"{folder}/memory.oom_control")
    return counter(events, "oom_kill")

"""Probe: every file a rank opens for writing inside the grading folder,
and every file it renames into it (a snapshot written aside, then moved
into place, is written under its final name).

An audit hook sees Python-level opens (logs, numpy, csv) and renames;
torch.save is recorded by the checkpoint probe because it opens files in C++.
"""

import os
import sys

from .state import Probe, RankState

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT


def _is_write(mode, flags) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def _written(event: str, args: tuple):
    """The path an audit event writes, if it writes one."""
    if event == "open" and args:
        mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else None)
        return args[0] if _is_write(mode, flags) else None
    if event == "os.rename" and len(args) > 1:  # os.rename and os.replace: a file written under a new name
        return args[1]
    return None


class FilesProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.workdir = os.path.realpath(state.workdir) + os.sep
        self.seen: set[str] = set()

    def install(self) -> None:
        sys.addaudithook(self.hook)

    def hook(self, event, args) -> None:
        written = _written(event, args)
        if not isinstance(written, (str, bytes, os.PathLike)):
            return
        path = os.path.realpath(os.fsdecode(written))
        if path.startswith(self.workdir) and path not in self.seen:
            self.seen.add(path)
            self.state.record("file_written", path=path)

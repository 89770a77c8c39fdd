"""Probe: every file a rank opens for writing inside the grading folder.

An audit hook sees Python-level opens (logs, numpy, csv); torch.save is
recorded by the checkpoint probe because it opens files in C++.
"""

import os
import sys

from .state import Probe, RankState

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT


def _is_write(mode, flags) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


class FilesProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.workdir = os.path.realpath(state.workdir) + os.sep
        self.seen: set[str] = set()

    def install(self) -> None:
        sys.addaudithook(self.hook)

    def hook(self, event, args) -> None:
        if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        if not _is_write(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None):
            return
        path = os.path.realpath(os.fsdecode(args[0]))
        if path.startswith(self.workdir) and path not in self.seen:
            self.seen.add(path)
            self.state.record("file_written", path=path)

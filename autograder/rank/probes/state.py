"""What the probes of one rank share: who this rank is, and where facts go."""

from __future__ import annotations

import functools
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...schema.events import validate


class StudentError(Exception):
    """Raised into student code when a call cannot work under the grader.

    Its message and hint are written for the student and end up in the report.
    """

    def __init__(self, message: str, hint: str = ""):
        super().__init__(f"{message} {hint}".strip())
        self.message, self.hint = message, hint


def wraps(original: Callable):
    """functools.wraps without __wrapped__: the original is not one attribute
    away from the student's code. (Closures and gc still reach it; the
    evidence from outside the ranks is what catches a way around a probe.)"""

    def decorate(wrapper: Callable) -> Callable:
        functools.update_wrapper(wrapper, original)
        del wrapper.__wrapped__
        return wrapper

    return decorate


@dataclass
class RankState:
    rank: int
    world_size: int
    backend: str
    store_path: str
    workdir: str
    channel_path: str  # the launcher's records socket; "" records nothing
    is_notebook: bool
    role: str = "rank"  # "rank", "started" (by the student's own launcher), or "worker<attempt>@<node>" (torchrun's)
    launcher: str = "mp"  # who started the rank: "mp" (the grader calls main) or "torchrun" (the file runs as a script)
    steps: int = 0
    # Filled in by the probes as the run goes on.
    extras: dict = field(default_factory=dict)

    def __post_init__(self):
        self._socket = None
        if self.channel_path:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._socket.connect(self.channel_path)
            self._socket.sendall(json.dumps({"role": self.role, "rank": self.rank}).encode() + b"\n")

    def record(self, kind: str, **facts: Any) -> None:
        validate(kind, facts)
        if self._socket is not None:
            line = json.dumps({"kind": kind, "time": time.time(), "step": self.steps, **facts}, default=str)
            self._socket.sendall(line.encode() + b"\n")

    def guarded(self, fn: Callable, *args, **kwargs):
        """Run probe code so that a bug in a probe never breaks the student's run."""
        try:
            return fn(*args, **kwargs)
        except StudentError:
            raise
        except Exception as error:
            self.record(
                "probe_error",
                where=getattr(fn, "__qualname__", repr(fn)),
                error=f"{type(error).__name__}: {error}"[:500],
            )
            return None

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()

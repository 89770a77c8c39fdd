"""What the probes of one rank share: who this rank is, where facts go, and
the facts that one probe finds and another reads."""

from __future__ import annotations

import functools
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...schema.events import validate


def is_sampled_step(step: int) -> bool:
    """The optimizer steps (counted from 1) whose weights and gradients are
    recorded: every early step, then every tenth; enough to draw the spread
    over time and to judge the averaging all along."""
    return step <= 20 or step % 10 == 0


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
    evaluation: str = ""  # the test set the grader evaluates the final model on (evaluation.py); "": none
    steps: int = 0  # steps of the optimizer that is judged (training.py)
    # Found by one probe and read by others, as the run goes on:
    # every module DDP wrapped, held after main has returned (ddp.py; read by training.py and checkpoint.py)
    ddp_modules: list = field(default_factory=list)
    # a DDP forward in training readied the reducer for the next backward (ddp.py; read by gradients.py)
    ddp_forward_ready: bool = False
    # passes over a sampler that ran to their end (sampler.py; read by snapshot.py and torchrun_worker.py)
    passes_finished: int = 0

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


class Probe:
    """One probe of a rank: install() wraps its piece of torch once, before
    the student's code runs; finish() records what is only known at the end.
    What it keeps between the two is its own; what another probe reads is a
    field of the RankState."""

    def __init__(self, state: RankState):
        self.state = state

    def install(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Most probes record as the run goes: nothing is left for the end."""

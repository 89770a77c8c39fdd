"""Process plumbing shared by the rank side, the warm grader and its clients."""

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
# Time for a warm process to start Python and its imports (torch, nbgrader) on a loaded machine.
STARTUP_S = 60


def _prctl(option: int, value: int) -> None:
    """Linux's prctl; elsewhere nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies, so nothing the
    grader started outlives it. Elsewhere this does nothing."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def out_of_reach() -> None:
    """No process of the same user may trace this one or take its files
    (ptrace, /proc/PID/mem, pidfd_getfd). Elsewhere than Linux this does nothing."""
    _prctl(_PR_SET_DUMPABLE, 0)


def traceable() -> None:
    """Undo out_of_reach in a process forked from one that is: as a fresh process is."""
    _prctl(_PR_SET_DUMPABLE, 1)


class NoAnswer(RuntimeError):
    """A warm process did not answer: it stopped, or it took longer than it had (`timed_out`)."""

    def __init__(self, message: str, timed_out: bool):
        super().__init__(message)
        self.timed_out = timed_out


class WarmProcess:
    """A helper process (`python -m MODULE ARGS`) that pays for its slow imports once,
    then answers one JSON line per request on stdout; its first line says it is ready.
    It leads a process group of its own, so stopping it kills all it started."""

    module = ""
    name = "the helper"  # in messages

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.requests, self.answers = self.process.stdin, self.process.stdout
        self.ready = False

    def send(self, request: dict) -> None:
        if not self.alive():
            raise NoAnswer(f"{self.name.capitalize()} stopped unexpectedly.", timed_out=False)
        self.wait_ready()
        self.requests.write(json.dumps(request) + "\n")
        self.requests.flush()

    def answer(self, timeout_s: float | None) -> dict:
        """Its next line; without one in time it is stopped and NoAnswer raised."""
        ready, _, _ = select.select([self.answers], [], [], timeout_s)
        line = self.answers.readline() if ready else ""
        if not line:
            self.stop()
            if not ready:
                raise NoAnswer(f"{self.name.capitalize()} did not answer within {timeout_s:g} s.", timed_out=True)
            raise NoAnswer(f"{self.name.capitalize()} stopped unexpectedly.", timed_out=False)
        return json.loads(line)

    def wait_ready(self) -> None:
        if not self.ready:
            self.answer(STARTUP_S)
            self.ready = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

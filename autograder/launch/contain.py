"""What every local launcher wraps a run in: the channel the records travel on
and, where the job asks for it, the sandbox (sandbox.py). Set up before the
first rank starts; `finish` runs once every rank is gone, and gives what was
seen from outside."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import autograder

from ..schema.run import Evidence
from .channel import RecordChannel
from .sandbox import RunLayout, Sandbox

PACKAGE_DIR = Path(autograder.__file__).resolve().parent


def course_root() -> Path | None:
    """The nbgrader course this grader was installed from (an editable
    install), if it is one: its solutions and hidden tests must stay unseen."""
    root = PACKAGE_DIR.parent
    return root if (root / "nbgrader_config.py").exists() else None


def hidden_paths() -> list[Path]:
    """Not in the sandbox: the course, the grader's home, and nbgrader's exchange (every student's
    submission: a grader who is not root runs the ranks and kernels as its own user outside)."""
    found = [Path(os.path.expanduser("~")).resolve(), *exchange_roots()]
    root = course_root()
    if root is not None:
        found.append(root)
    return [p for p in found if p != Path("/")]


EXCHANGE_VARIABLE = "DDP_EXCHANGE"  # the exchange's root on the course's hub (hub/ sets it for every user)
NBGRADER_EXCHANGE = Path("/usr/local/share/nbgrader/exchange")  # nbgrader's default root


def exchange_roots() -> list[Path]:
    named = os.environ.get(EXCHANGE_VARIABLE)
    return [NBGRADER_EXCHANGE, *([Path(named).resolve()] if named else [])]


def kept_paths() -> list[Path]:
    """What ranks need from under a hidden folder: Python, the venv, the grader's package."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return sorted({Path(p).resolve() for p in prefixes} | {PACKAGE_DIR})


def slot_of(role: str) -> int:
    """The sandbox slot of a record stream's process, from its role: a rank the
    student's launcher started is slot 0's; a torchrun worker, "worker<attempt>@<node>", is its node's."""
    return int(role.rpartition("@")[2]) if "@" in role else 0


class Containment:
    def __init__(self, job, private_dir: Path):
        code_dir = Path(job.module_path).parent
        run_dir = Path(os.path.commonpath([private_dir, job.workdir, code_dir]))
        self.layout = RunLayout(
            run_dir, code_dir, Path(job.workdir), private_dir / "rendezvous", private_dir / "channel"
        )
        self.layout.rendezvous_dir.mkdir()
        self.layout.channel_dir.mkdir(mode=0o755)  # the ranks' users may connect in it, not remove
        self.store_path = str(self.layout.store_path)
        # Made here, so that every rank's user may open it (a rank would make it for its user alone).
        os.close(os.open(self.store_path, os.O_CREAT | os.O_WRONLY, 0o666))
        os.chmod(self.store_path, 0o666)
        self.sandbox = None
        uid_of = None
        if job.sandboxed:
            self.sandbox = Sandbox(self.layout, job.world_size, job.limits, hidden_paths(), kept_paths())
            if not self.sandbox.user_namespace:  # else every rank is the grader's user outside
                base = self.sandbox.uid_base
                uid_of = lambda role, rank: base + (rank if role == "rank" else slot_of(role))  # noqa: E731
        self.channel = RecordChannel(self.layout.channel_dir, uid_of)

    @property
    def parent_fds(self) -> tuple[int, ...]:
        return self.channel.parent_fds + (self.sandbox.parent_fds if self.sandbox is not None else ())

    @property
    def sandbox_view(self):
        return self.sandbox.view() if self.sandbox is not None else None

    def finish(self) -> Evidence:
        """Once the ranks are dead: end what they started, read the evidence,
        take the sandbox down, and read the records to their end."""
        evidence = Evidence()
        try:
            if self.sandbox is not None:
                self.sandbox.end_processes()
                evidence = self.sandbox.evidence()
        finally:
            if self.sandbox is not None:
                self.sandbox.close()
            self.channel.close()
        return evidence

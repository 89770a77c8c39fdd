"""The run's shared types: how a grading runs (RunOptions), what a launch
asks for (Limits), what the ranks join (SandboxView), and what the launcher
saw of each rank and of the whole run (RankOutcome, Evidence, LaunchResult).
Every stage reads them, so they live here, importing neither torch nor
ctypes: the judge, the reports and the notebook side read a run without
loading the machinery that ran it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum

DEFAULT_WORLD_SIZE = 2
HIDDEN_WORLD_SIZE = 3  # the hidden tests' run: a world size the student did not see graded
DEFAULT_TIMEOUT_S = 120.0
MAX_OWN_LAUNCHER_RANKS = 8  # the most ranks a student's own launcher may start while graded


@dataclass(frozen=True)
class Limits:
    """What one rank may use. Exceeding one ends in a verdict that names it."""

    memory_bytes: int = 4 * 2**30
    processes: int = 256  # the whole run's processes and threads
    file_bytes: int = 1 * 2**30  # the largest file a rank may write
    tmp_bytes: int = 2 * 2**30  # /tmp (with the working folder) and /dev/shm, each
    open_files: int = 4096
    cpu_seconds: int = 3600


DEFAULT_LIMITS = Limits()

SANDBOX_POLICIES = ("required", "auto", "off")


@dataclass(frozen=True)
class RunOptions:
    """How one grading runs a submission: every default is declared here, and
    the command line, the notebook's checks and the class grading read them."""

    world_size: int = DEFAULT_WORLD_SIZE
    backend: str = "auto"  # "auto": nccl when there is a GPU per rank, else gloo
    timeout_s: float = DEFAULT_TIMEOUT_S  # the deadline of the graded run; every rank is killed at it
    launcher: str | None = None  # how the ranks start (autograder.launch.LAUNCHERS); None: the exercise's own
    # "required": never without the sandbox (an instructor's grading); "auto": where the machine allows
    # (a student's own check, which can only fool the student); "off": unconfined, for trusted code.
    sandbox: str = "auto"
    limits: Limits = DEFAULT_LIMITS  # what each rank may use in the sandbox
    # This process has run no torch computation, so the ranks may fork from it (fast).
    fork_from_here: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunOptions:
        return cls(**{**data, "limits": Limits(**data["limits"])})


DEFAULT_OPTIONS = RunOptions()


class RankStatus(StrEnum):
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"  # killed by the launcher because another rank failed
    HUNG = "hung"  # still running at the deadline
    NOT_STARTED = "not started"


@dataclass(kw_only=True)
class RankOutcome:
    rank: int
    exit_code: int | None
    status: RankStatus
    output: str = ""
    output_bytes: int = 0
    stack: str = ""
    exited_at: float | None = None  # wall clock, when the launcher saw it exit
    # What reached the rank's output pipe, by line template (lines.py):
    # [[template, times written, first such line], ...], the most written first.
    lines: list = field(default_factory=list)


@dataclass(frozen=True)
class SandboxView:
    """What a rank needs to join the run's sandbox: JSON-able, in its RankSpec."""

    init_pid: int
    holder_pid: int
    mount_namespaces: tuple[int, ...]  # per rank, the holder's descriptor of that rank's mount namespace
    user_namespace: bool  # the run has a user namespace of its own: the grader is not root
    uid_base: int
    memory_cgroups: tuple[str, ...]  # per rank, its cgroup folder; () where there is none
    pids_cgroup: str  # "" where there is none
    limits: dict


@dataclass
class Evidence:
    """What the grader saw of the run from outside the ranks."""

    sandboxed: bool = False
    # New or changed file -> the ranks that wrote it, seen by the kernel (fanotify), however it was written.
    written_by: dict = field(default_factory=dict)
    loopback_packets: int | None = None  # packets the run's ranks sent each other
    joined: list | None = None  # the ranks that wrote to the rendezvous store: who really joined
    over_memory: list = field(default_factory=list)  # ranks the kernel killed at the memory limit
    memory_by_cgroup: bool = False  # else an rlimit bounds each rank's heap: an allocation past it fails
    process_limit_hit: bool = False
    limits: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class LaunchResult:
    ranks: list[RankOutcome]
    duration_s: float
    records: list[list] = field(default_factory=list)  # per rank, the raw events it sent
    first_failure: int | None = None  # the rank the launcher saw fail first
    hung: list[int] = field(default_factory=list)
    start_error: str | None = None  # the ranks could not be started at all
    started_records: list[list] = field(default_factory=list)  # per rank a student's own launcher started
    evidence: Evidence = field(default_factory=Evidence)
    intrusions: list[str] = field(default_factory=list)  # record streams the channel kept out
    # A torchrun job (torchrun.py): `records` and `ranks` are its workers' last
    # attempt; these hold every attempt, the agents, and the grading's other jobs.
    attempts: list[list[list]] = field(default_factory=list)  # per attempt, per rank: the raw events
    attempt_outcomes: list[list[RankOutcome]] = field(default_factory=list)
    agents: list[RankOutcome] = field(default_factory=list)  # one per node
    jobs: dict[str, LaunchResult] = field(default_factory=dict)  # name -> the other torchrun jobs of the grading

"""What a check returns, and the report that gathers them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..schema.events import CheckStatus

PASSED, FAILED, SKIPPED = CheckStatus.PASSED, CheckStatus.FAILED, CheckStatus.SKIPPED


@dataclass(frozen=True)
class Outcome:
    """A check's finding, before its id and points are attached."""

    status: CheckStatus
    message: str
    hint: str = ""
    rank: int | None = None
    reached: bool = True  # False: failed only because the run stopped before its evidence


def passed(message: str) -> Outcome:
    return Outcome(PASSED, message)


def failed(message: str, hint: str, rank: int | None = None) -> Outcome:
    return Outcome(FAILED, message, hint, rank)


def skipped(reason: str) -> Outcome:
    """Does not apply to this submission: nothing to fix, so the points are given."""
    return Outcome(SKIPPED, reason)


NOT_REACHED_HINT = "Fix the error reported above, then check again."


def not_reached(message: str, rank: int | None = None) -> Outcome:
    """Fail closed: the run stopped before this check's evidence was recorded."""
    return Outcome(FAILED, message, NOT_REACHED_HINT, rank, reached=False)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    id: str
    title: str
    status: CheckStatus
    points: float
    max_points: float
    message: str
    hint: str = ""
    rank: int | None = None
    reached: bool = True  # False: failed only because the run stopped first

    @property
    def passed(self) -> bool:
        return self.status != FAILED

    @property
    def counted(self) -> bool:
        """False for a check that cannot apply on this machine (0 of 0 points)."""
        return self.max_points > 0


@dataclass(kw_only=True)
class RankSummary:
    rank: int
    exit_code: int | None
    status: str
    error: str | None
    output: str
    output_bytes: int
    stack: str = ""


@dataclass(kw_only=True)
class Report:
    exercise: str
    world_size: int
    backend: str
    duration_s: float
    error: str | None
    error_hint: str
    ranks: list[RankSummary]
    checks: list[Verdict]
    submission: str = ""
    files_left: list[str] = field(default_factory=list)
    # Per-rank series for the pictures: partition, losses, weight spread.
    details: dict = field(default_factory=dict)
    # Where the grader could not observe something (a probe failed): a grader
    # problem to tell the instructor about, never the student's fault.
    probe_errors: list[str] = field(default_factory=list)
    # Where the root-cause rank stopped, "LINE (file, line N)", for the row
    # that gathers the checks the run did not reach. Empty for a run that finished.
    stopped_at: str = ""
    # Why the ranks ran without the sandbox (a student's own machine); "" when they ran in it.
    unsandboxed: str = ""

    @property
    def score(self) -> float:
        return sum(v.points for v in self.checks)

    @property
    def max_score(self) -> float:
        return sum(v.max_points for v in self.checks)

    @property
    def passed(self) -> bool:
        return self.error is None and all(v.passed for v in self.checks)

    def check(self, check_id: str) -> Verdict:
        return next(v for v in self.checks if v.id == check_id)

    @property
    def not_reached(self) -> list[Verdict]:
        return [v for v in self.checks if not v.reached]

    def not_reached_summary(self) -> str:
        """One sentence for all the checks the run did not reach: the
        reports show it in one row instead of one row per check."""
        titles = ", ".join(v.title for v in self.not_reached)
        if self.stopped_at:
            return f"Not reached: the run stopped at {self.stopped_at}. Not checked: {titles}."
        return f"Not reached: the run stopped before their evidence was recorded (see above). Not checked: {titles}."

    def __repr__(self) -> str:
        # Short: the notebook saves this text beside the HTML.
        state = "all checks passed" if self.passed else f"{sum(not v.passed for v in self.checks)} check(s) failed"
        return (
            f"<Report {self.exercise}: {self.score:g}/{self.max_score:g}, "
            f"{state}{'; ' + self.error if self.error else ''}>"
        )

"""What a check returns, and the report that gathers them."""
from __future__ import annotations

from dataclasses import dataclass, field

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class Outcome:
    """A check's finding, before its id and points are attached."""

    status: str
    message: str
    hint: str = ""
    rank: int | None = None


def passed(message: str) -> Outcome:
    return Outcome(PASSED, message)


def failed(message: str, hint: str, rank: int | None = None) -> Outcome:
    return Outcome(FAILED, message, hint, rank)


def skipped(reason: str) -> Outcome:
    """Does not apply to this submission: nothing to fix, so the points are given."""
    return Outcome(SKIPPED, reason)


@dataclass(frozen=True)
class Verdict:
    id: str
    title: str
    status: str
    points: float
    max_points: float
    message: str
    hint: str = ""
    rank: int | None = None

    @property
    def passed(self) -> bool:
        return self.status != FAILED


@dataclass
class RankSummary:
    rank: int
    exit_code: int | None
    status: str
    error: str | None
    output: str
    output_bytes: int
    stack: str = ""


@dataclass
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

    def __repr__(self) -> str:
        # Short: the notebook saves this text beside the HTML.
        state = "all checks passed" if self.passed else f"{sum(not v.passed for v in self.checks)} check(s) failed"
        return f"<Report {self.exercise}: {self.score:g}/{self.max_score:g}, {state}{'; ' + self.error if self.error else ''}>"

    def _repr_html_(self) -> str:
        """Jupyter shows the report when a cell ends with check(...)."""
        from .reports import html  # lazily: matplotlib is imported only when a report is shown

        return html.render(self)

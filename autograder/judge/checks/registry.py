"""The registry of checks: a check is an id, its points, and a pure function of
the run's records that returns passed, failed (with a hint) or skipped.
`run_checks` applies them and fails closed on records that prove nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..records import RunRecords
from ..tampering import TAMPERING_HINT, contradictions
from ..verdict import FAILED, SKIPPED, Outcome, Verdict, failed, not_reached


@dataclass(frozen=True, kw_only=True)
class Check:
    id: str
    title: str
    points: float
    change: str  # which of the five DDP changes it checks, as the notebooks' grade cells say
    judge: Callable[[RunRecords], Outcome]
    # Graded checks get a grade cell. gpu_device does not: the grading
    # machines have no GPU, so a cell would check nothing there.
    graded: bool = True
    # Why the check cannot apply to a run on this machine, or None when it can.
    # A check that cannot apply counts 0 of 0 points: the score is out of
    # what this machine can check.
    cannot_apply: Callable[[RunRecords], str | None] | None = None

    @property
    def passes_when(self) -> str:
        """The judge's docstring, "Passes when ...", on one line without those words: for the
        README's tables of checks (python -m tools.grade_cells writes them)."""
        return " ".join(self.judge.__doc__.split()).removeprefix(PASSES_WHEN).removesuffix(".")


PASSES_WHEN = "Passes when "
REGISTERED: dict[str, Check] = {}  # by id, in the order they were registered


def check(
    check_id: str,
    title: str,
    points: float,
    change: str,
    graded: bool = True,
    cannot_apply: Callable[[RunRecords], str | None] | None = None,
):
    """Register the decorated function, whose docstring says "Passes when ...",
    as a check: everything else (the exercises, their grade cells and points,
    the reports, the README's tables) is derived from the registry."""

    def register(judge):
        assert check_id not in REGISTERED, f"two checks are called {check_id!r}"
        assert (judge.__doc__ or "").startswith(PASSES_WHEN), f"{check_id}: the docstring says {PASSES_WHEN!r}..."
        REGISTERED[check_id] = Check(
            id=check_id,
            title=title,
            points=points,
            change=change,
            judge=judge,
            graded=graded,
            cannot_apply=cannot_apply,
        )
        return judge

    return register


def by_id(check_id: str) -> Check:
    if check_id not in REGISTERED:
        raise ValueError(f"Unknown check {check_id!r}; known checks: {', '.join(REGISTERED)}.")
    return REGISTERED[check_id]


def run_checks(run: RunRecords, check_ids) -> list[Verdict]:
    verdicts = []
    for item in (by_id(i) for i in check_ids):
        reason = item.cannot_apply(run) if item.cannot_apply else None
        if reason:
            verdicts.append(
                Verdict(id=item.id, title=item.title, status=SKIPPED, points=0.0, max_points=0.0, message=reason)
            )
            continue
        try:
            outcome = _not_runnable(run) or item.judge(run)
        except Exception as error:  # records no probe wrote: forged, or cut short in a way not foreseen
            outcome = failed(
                f"Not checked: the run's records are incomplete or malformed ({type(error).__name__}).",
                "If your code does not write to the grader's files, tell your instructor.",
            )
        if outcome.status == SKIPPED and not run.all_finished:
            # Fail closed: "does not apply" is only known of a run that finished.
            rank = stopping_rank(run)
            outcome = not_reached(f"Not checked: {run.why_not_reached(rank)}.", rank)
        earned = 0.0 if outcome.status == FAILED else item.points
        verdicts.append(Verdict(id=item.id, title=item.title, points=earned, max_points=item.points, **asdict(outcome)))
    return verdicts


def _not_runnable(run: RunRecords) -> Outcome | None:
    if run.problem is not None:
        return Outcome(FAILED, "Not checked: the code could not run.", run.problem.hint, reached=False)
    if not run.has_every_rank:
        return failed(
            f"Not checked: the run's records are incomplete (records of {len(run.ranks)} of {run.world_size} ranks).",
            "This is a problem of the grading machine; tell your instructor.",
        )
    tampered = next((r for r in run.ranks if r.malformed), None)
    if tampered is not None:
        return not_reached(f"Not checked: {run.why_not_reached(tampered.rank)}.", tampered.rank)
    found = contradictions(run)
    if found:
        return failed(f"Not checked: tampering detected: {found[0]}.", TAMPERING_HINT)
    return None


def stopping_rank(run: RunRecords) -> int:
    """The rank that stopped the run, as the report's headline names it."""
    rank = run.root_cause_rank
    if rank is None:  # the launcher saw every rank finish: the first whose records say otherwise, else rank 0
        rank = next((r.rank for r in run.ranks if not r.finished), 0)
    return rank


def cannot_confirm(run: RunRecords, what: str) -> Outcome:
    """Fail closed: a run that stopped before the evidence proves nothing."""
    rank = stopping_rank(run)
    return not_reached(f"Could not confirm {what}: {run.why_not_reached(rank)}.", rank)

"""Small pieces of student-facing wording, shared by the checks and the reports."""

from __future__ import annotations

from .schema.run import RankStatus

# What happened to a rank, as a phrase after "rank N was" / "Status:".
RANK_STATUS_WORDS = {
    RankStatus.FINISHED: "finished",
    RankStatus.FAILED: "failed",
    RankStatus.STOPPED: "stopped by the grader because another rank failed",
    RankStatus.HUNG: "still running at the deadline",
    RankStatus.NOT_STARTED: "not started",
}


def exit_words(exit_code: int) -> str:
    """-11 -> 'killed by signal 11'; 3 -> 'exit status 3'."""
    return f"killed by signal {-exit_code}" if exit_code < 0 else f"exit status {exit_code}"


def exit_phrase(exit_code: int) -> str:
    """-11 -> 'was killed by signal 11'; 3 -> 'exited with status 3'."""
    return f"was {exit_words(exit_code)}" if exit_code < 0 else f"exited with status {exit_code}"


def ranks_text(ranks) -> str:
    """[1] -> 'rank 1'; [0, 1, 2] -> 'ranks 0, 1 and 2'."""
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def plural(count: int, noun: str) -> str:
    """(1, 'rank') -> '1 rank'; (3, 'rank') -> '3 ranks'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def points(value: float) -> str:
    """17.0 -> '17', 0.5 -> '0.5'."""
    return f"{value:g}"


def unsandboxed_note(report) -> str:
    """One line for a report whose ranks ran without the sandbox."""
    return (
        f"your code ran unconfined, as your own user ({report.unsandboxed}). That is fine for checking your own "
        "work; the instructor's grading runs it in a sandbox."
    )

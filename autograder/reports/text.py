"""The terminal report: one line per check, and under each failure what was
seen, on which rank, and what to change. Coloured with rich."""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from ..judge.verdict import FAILED, PASSED, SKIPPED, Report, Verdict
from ..wording import plural, points, unsandboxed_note

MARKS = {PASSED: ("PASS", "green"), FAILED: ("FAIL", "bold red"), SKIPPED: ("SKIP", "yellow")}
OUTPUT_LINES = 15


def _check_line(console: Console, verdict: Verdict, width: int) -> None:
    mark, style = MARKS[verdict.status]
    score = f"{points(verdict.points)}/{points(verdict.max_points)}" if verdict.counted else "not counted"
    console.print(Text.assemble((f"{mark}  ", style), verdict.title.ljust(width + 2), (score, "dim")))
    if verdict.status == FAILED:
        console.print(Padding(Text(verdict.message), (0, 0, 0, 6)))
        if verdict.hint:
            console.print(Padding(Text.assemble(("Hint: ", "bold cyan"), verdict.hint), (0, 0, 0, 6)))


def render(report: Report, console: Console, show_output: bool = False) -> None:
    console.print(
        Text.assemble(
            ("DDP autograder", "bold"),
            f"  {report.exercise}  ·  {plural(report.world_size, 'rank')}  ·  "
            f"{report.backend}  ·  {report.duration_s:.1f} s",
        )
    )
    if report.error:
        console.print(Text.assemble(("\nProblem: ", "bold red"), report.error))
        if report.error_hint:
            console.print(Text.assemble(("  What to do: ", "bold"), report.error_hint))
    console.print()
    width = max(len(v.title) for v in report.checks)
    for verdict in report.checks:
        if verdict.reached:
            _check_line(console, verdict, width)
    missed = report.not_reached
    if missed:
        lost = sum(v.max_points for v in missed)
        console.print(
            Text.assemble(
                ("FAIL  ", MARKS[FAILED][1]),
                f"{plural(len(missed), 'check')} not reached".ljust(width + 2),
                (f"0/{points(lost)}", "dim"),
            )
        )
        console.print(Padding(Text(report.not_reached_summary()), (0, 0, 0, 6)))
        console.print(Padding(Text.assemble(("Hint: ", "bold cyan"), missed[0].hint), (0, 0, 0, 6)))
    for note in report.probe_errors:
        console.print(Text.assemble(("\nGrader problem: ", "bold yellow"), note))
    if report.unsandboxed:
        console.print(Text.assemble(("\nNo sandbox: ", "bold yellow"), unsandboxed_note(report)))
    console.print(
        Text.assemble(
            ("\nScore: ", "bold"),
            f"{points(report.score)} / {points(report.max_score)}",
            ("   all checks passed" if report.passed else "", "green"),
        )
    )
    for rank in report.ranks:
        if rank.error or show_output:
            lines = rank.output.rstrip().splitlines()
            if rank.error:
                console.print(Text.assemble((f"\nrank {rank.rank}: ", "bold"), rank.error))
            if lines and (show_output or rank.error):
                console.print(Text(f"  last output of rank {rank.rank}:", style="dim"))
                for line in lines[-OUTPUT_LINES:]:
                    console.print(Text("  | " + line, style="dim"))

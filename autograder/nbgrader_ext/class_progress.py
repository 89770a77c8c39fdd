"""What a person hears while a class is graded (class_grading.py): a progress bar with the
gradings under way and an ETA, and each failure as it happens."""

from __future__ import annotations

from rich.markup import escape


class Progress:
    """What a caller hears while the class is graded; these do nothing."""

    def begin(self, total: int, unchanged: list[str]) -> None: ...

    def started(self, running: set[str]) -> None: ...

    def finished(self, outcome, running: set[str]) -> None: ...


SILENT = Progress()


class ConsoleProgress(Progress):
    """A rich progress bar: done and total, the students being graded, an ETA, and failures as they happen."""

    def __init__(self, console, assignments: list[str]):
        from rich import progress

        self.console, self.assignments = console, assignments
        self.bar = progress.Progress(
            progress.TextColumn("{task.description}"),
            progress.BarColumn(),
            progress.MofNCompleteColumn(),
            progress.TimeElapsedColumn(),
            progress.TextColumn("eta"),
            progress.TimeRemainingColumn(),
            progress.TextColumn("[dim]{task.fields[running]}"),
            console=console,
            transient=True,
        )
        self.task = None

    def begin(self, total: int, unchanged: list[str]) -> None:
        if unchanged:
            self.console.print(f"Unchanged since last graded, left as they are: {escape(', '.join(unchanged))}")
        self.bar.start()
        self.task = self.bar.add_task(f"autograde {' '.join(self.assignments)}", total=total, running="")

    def started(self, running: set[str]) -> None:
        self.bar.update(self.task, running=_grading(running))

    def finished(self, outcome, running: set[str]) -> None:
        self.bar.update(self.task, advance=1, running=_grading(running))
        if outcome.failed:
            why = escape(f"{outcome.why} after {outcome.seconds:.0f} s")
            which = f" ({outcome.assignment})" if len(self.assignments) > 1 else ""
            self.console.print(f"[bold red]{escape(outcome.student + which)}[/]: {why}")

    def end(self) -> None:
        self.bar.stop()


def _grading(running: set[str]) -> str:
    """The progress line's list of the students being graded (escaped: it is markup)."""
    return escape("grading " + ", ".join(sorted(running))) if running else ""

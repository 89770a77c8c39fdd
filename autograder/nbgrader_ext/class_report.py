"""What a class got wrong, at a glance:

    python -m autograder class-report ASSIGNMENT [--html report.html]

From the gradebook: the scores and each grade cell's pass rate. From the
autograded notebooks: the failure messages the students were shown, with
who got each, and the runs that crashed or hung (the out-of-kernel grading
keeps a summary of each run in the notebook's metadata). A submission with
no autograded notebook is listed as not graded.

The summary is printed with rich; --html also writes it as one standalone
page, its two charts drawn with matplotlib.
"""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .._files import write_text
from ..exercises import by_assignment
from ..judge.checks import by_id
from ..wording import plural, points
from .exports import CourseError, cell_columns, chosen_assignments, open_gradebook
from .preprocessors import RUNS_METADATA

TOP_FAILURES = 10


@dataclass(frozen=True)
class PassRate:
    title: str
    passed: int
    graded: int

    @property
    def fraction(self) -> float:
        return self.passed / self.graded if self.graded else 0.0


@dataclass
class Failure:
    title: str
    message: str
    students: list[str] = field(default_factory=list)
    world_sizes: set[int] = field(default_factory=set)  # of the runs it was seen in; none for a quiz cell

    @property
    def check(self) -> str:
        if not self.world_sizes:
            return self.title
        sizes = sorted(self.world_sizes)
        shown = " and ".join(str(size) for size in sizes)
        return f"{self.title} ({shown} ranks)" if sizes != [1] else f"{self.title} (1 rank)"


@dataclass
class ClassReport:
    assignment: str
    max_score: float
    students: int  # in the gradebook
    scores: dict[str, float]  # of the students who submitted
    pass_rates: list[PassRate]
    failures: list[Failure]  # the most common first
    stopped: dict[str, list[str]]  # student -> how each of their runs that did not end well ended

    @property
    def summary(self) -> str:
        if not self.scores:
            return f"Nobody of {self.students} has a graded submission of {self.assignment}."
        values = list(self.scores.values())
        return (
            f"{len(values)} of {plural(self.students, 'student')} submitted: "
            f"mean {statistics.mean(values):.1f}, median {points(statistics.median(values))}, "
            f"{sum(v == self.max_score for v in values)} with full marks ({points(self.max_score)})."
        )


def _runs(notebook) -> dict:
    """The runs' summaries that the out-of-kernel grading wrote. Only a DDP
    exercise's notebook has them; there that grading replaces whatever the
    submitted notebook held, so a student cannot plant them."""
    return notebook.metadata.get(RUNS_METADATA, {})


def _shown_failures(notebook) -> list[tuple[str, str, int | None]]:
    """(title, message, world size) of each failed check (a DDP notebook's runs), or
    of each grade cell that raised (any other notebook), as the student was shown it."""
    runs = _runs(notebook)
    if runs:
        return [
            (by_id(check).title, message, int(size))
            for size, run in sorted(runs.items())
            for check, message in run["failed"].items()
        ]
    found = []
    for cell in notebook.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []) if grade_id else []:
            if output.output_type == "error":
                found.append((grade_id, f"{output.ename}: {output.evalue}".strip(": "), None))
    return found


def _how_runs_stopped(notebook) -> list[str]:
    stopped = []
    for size, run in sorted(_runs(notebook).items()):
        if run["hung"]:
            stopped.append(f"{plural(int(size), 'rank')}: hung, stopped at the time limit")
        elif run["error"]:
            stopped.append(f"{plural(int(size), 'rank')}: {run['error'].splitlines()[0]}")
    return stopped


def build(course: Path, assignment: str) -> ClassReport:
    with open_gradebook(course) as gb:
        chosen_assignments(gb, assignment)
        students = len(gb.students)
        scores = {s.student.id: s.score for s in gb.assignment_submissions(assignment)}
        max_score = gb.find_assignment(assignment).max_score
        cells = cell_columns(gb, assignment)
    if not scores:
        raise CourseError(f"Nobody has a graded submission of {assignment} yet: there is nothing to report.")
    rates = [PassRate(c.title, sum(v >= c.max_score for v in c.scores.values()), len(c.scores)) for c in cells]
    failures: dict[tuple[str, str], Failure] = {}
    stopped: dict[str, list[str]] = defaultdict(list)
    for student in sorted(scores):
        notebooks = sorted((course / "autograded" / student / assignment).glob("*.ipynb"))
        if not notebooks:
            stopped[student].append("not autograded: its grading failed or has not run")
        for path in notebooks:
            notebook = nbformat.read(path, as_version=4)
            if by_assignment(assignment) is None:  # a lesson's notebook: metadata of the student's making
                notebook.metadata.pop(RUNS_METADATA, None)
            for title, message, world_size in _shown_failures(notebook):
                failure = failures.setdefault((title, message), Failure(title, message))
                if student not in failure.students:
                    failure.students.append(student)
                if world_size is not None:
                    failure.world_sizes.add(world_size)
            stopped[student] += _how_runs_stopped(notebook)
    common = sorted(failures.values(), key=lambda f: (-len(f.students), f.title, f.message))
    return ClassReport(
        assignment, max_score, students, scores, rates, common, {s: why for s, why in stopped.items() if why}
    )


# --- the terminal -----------------------------------------------------------------


def render(report: ClassReport, console) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console.print(f"[bold]{escape(report.assignment)}[/]: {escape(report.summary)}", soft_wrap=True)
    rates = Table(title="Each check's pass rate", title_justify="left", box=box.SIMPLE_HEAD)
    for heading, justify in (("Check", "left"), ("Passed", "right"), ("Rate", "right")):
        rates.add_column(heading, justify=justify)
    for rate in report.pass_rates:
        rates.add_row(Text(rate.title), f"{rate.passed}/{rate.graded}", f"{rate.fraction:.0%}")
    console.print(rates)
    if report.failures:
        common = Table(title="The most common failures", title_justify="left", box=box.SIMPLE_HEAD)
        for heading in ("Students", "Check", "Message"):
            common.add_column(heading, overflow="fold")
        for failure in report.failures[:TOP_FAILURES]:
            common.add_row(*(Text(cell) for cell in (", ".join(failure.students), failure.check, failure.message)))
        console.print(common)
    for student, how in report.stopped.items():
        console.print(f"[bold red]{escape(student)}[/]: " + escape("; ".join(how)), highlight=False)


# --- the page ---------------------------------------------------------------------


def _png(figure) -> str:
    from ..reports.plots import data_uri, png

    return data_uri(png(figure))


def histogram(report: ClassReport) -> str:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 2.8))
    axes = figure.add_subplot()
    edges = [edge - 0.5 for edge in range(int(report.max_score) + 2)]  # one bar per whole score
    axes.hist(list(report.scores.values()), bins=edges, color="#1f77b4", rwidth=0.9)
    axes.set_xlabel(f"score (of {points(report.max_score)})")
    axes.set_ylabel("students")
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.yaxis.get_major_locator().set_params(integer=True)
    figure.tight_layout()
    return _png(figure)


def pass_rate_chart(report: ClassReport) -> str:
    from matplotlib.figure import Figure

    rates = report.pass_rates
    figure = Figure(figsize=(6, 0.35 * len(rates) + 0.9))
    axes = figure.add_subplot()
    positions = range(len(rates))
    axes.barh(list(positions), [100 * r.fraction for r in rates], color="#2ca02c")
    axes.set_yticks(list(positions), [r.title for r in rates])
    axes.invert_yaxis()
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of submissions that passed")
    figure.tight_layout()
    return _png(figure)


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; width: 100%; margin: 0.5rem 0 1.5rem; }
th, td { text-align: left; padding: 0.3rem 0.5rem; border-bottom: 1px solid #ddd; vertical-align: top; }
img { max-width: 100%; }
"""


def _table(headings: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(report: ClassReport) -> str:
    failures = [
        [str(len(f.students)), f.check, f.message, ", ".join(f.students)] for f in report.failures[:TOP_FAILURES]
    ]
    stopped = [[student, "; ".join(how)] for student, how in report.stopped.items()]
    title = html.escape(f"{report.assignment}: the class report")
    return "".join(
        [
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>',
            f"<style>{STYLE}</style></head><body><h1>{title}</h1><p>{html.escape(report.summary)}</p>",
            f'<h2>Scores</h2><img id="histogram" alt="a histogram of the scores" src="{histogram(report)}">',
            f'<h2>Each check\'s pass rate</h2><img id="pass-rates" alt="each check\'s pass rate" '
            f'src="{pass_rate_chart(report)}">',
            "<h2>The most common failures</h2>",
            _table(["How many", "Check", "Message", "Students"], failures) if failures else "<p>No check failed.</p>",
            "<h2>Runs that crashed or hung</h2>",
            _table(["Student", "How"], stopped) if stopped else "<p>Every run ended on its own.</p>",
            "</body></html>",
        ]
    )


def write(report: ClassReport, path: Path) -> None:
    try:
        write_text(path, page(report))
    except OSError as error:
        raise CourseError(f"Cannot write {path}: {error.strerror or error}.") from error

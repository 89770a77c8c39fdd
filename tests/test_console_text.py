"""Text that comes from a run or a student (errors, ids, messages) is printed as
it is: rich must not read "[/...]" in a gloo error as markup and crash."""

from __future__ import annotations

from rich.console import Console

from autograder.nbgrader_ext import class_report
from autograder.nbgrader_ext.class_grading import Outcome
from autograder.nbgrader_ext.class_progress import ConsoleProgress

GLOO_ERROR = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Connection closed by peer"
ODD_ID = "[bold]x[/bold]"


def printed(render) -> str:
    console = Console(record=True, width=400, color_system=None)
    render(console)
    return console.export_text()


def test_the_class_report_prints_errors_and_ids_as_they_are():
    report = class_report.ClassReport(
        assignment="linear_regression",
        max_score=10,
        students=1,
        scores={ODD_ID: 0},
        pass_rates=[class_report.PassRate("Only rank [0] saves", 0, 1)],
        failures=[class_report.Failure("Only rank [0] saves", GLOO_ERROR, [ODD_ID], {2})],
        stopped={ODD_ID: [f"with 2 ranks: {GLOO_ERROR}"]},
    )
    text = printed(lambda console: class_report.render(report, console))
    assert text.count(GLOO_ERROR) == 2 and text.count(ODD_ID) == 2 and "Only rank [0] saves" in text


def test_the_progress_prints_a_failed_student_as_they_are():
    def fail(console):
        progress = ConsoleProgress(console, ["linear_regression"])
        progress.begin(1, [ODD_ID])
        progress.started({ODD_ID})
        progress.finished(Outcome(ODD_ID, None, 1.0, killed_by=GLOO_ERROR), set())
        progress.end()

    text = printed(fail)
    assert f"{ODD_ID}: {GLOO_ERROR} after 1 s" in text and ODD_ID in text.splitlines()[0]

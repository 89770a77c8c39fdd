"""Preprocessors the course adds to nbgrader's pipelines."""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Float, Unicode

from ..exercises import by_assignment
from ..notebook.client import GraderServer, GradingFailed, autograde_server, grading_request
from ..notebook.grade_cells import failure_lines, heading
from ..reports import json_report
from ..schema.run import DEFAULT_OPTIONS, DEFAULT_WORLD_SIZE, RunOptions


class ClearHiddenTestTracebacks(NbGraderPreprocessor):
    """Remove hidden-test code from the error outputs of grade cells.

    ClearHiddenTests removes the hidden tests from a cell's source, but when a
    hidden assert fails, IPython's traceback in the cell's output quotes its
    line. This drops every traceback line that quotes a line of the cell's
    hidden-test region, and keeps the rest, including the assertion's message,
    which is written for students. It must run before ClearHiddenTests, while
    the hidden region is still in the source.
    """

    begin_test_delimeter = Unicode(
        "BEGIN HIDDEN TESTS", help="The delimiter marking the beginning of hidden tests"
    ).tag(config=True)
    end_test_delimeter = Unicode("END HIDDEN TESTS", help="The delimiter marking the end of hidden tests").tag(
        config=True
    )

    ansi = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    line_number = re.compile(r"^\s*(?:-*>\s*)?\d+\s")  # IPython's "----> 4 " and "      5 "

    def hidden_lines(self, source: str) -> set[str]:
        lines, inside = set(), False
        for line in source.splitlines():
            if self.begin_test_delimeter in line:
                inside = True
            if inside and line.strip():
                lines.add(line.strip())
            if self.end_test_delimeter in line:
                inside = False
        return lines

    def quotes_hidden(self, line: str, hidden: set[str]) -> bool:
        plain = self.ansi.sub("", line)
        return self.line_number.sub("", plain, count=1).strip() in hidden or plain.strip() in hidden

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell):
            hidden = self.hidden_lines(cell.source)
            for output in cell.get("outputs", []) if hidden else []:
                if output.output_type == "error":
                    entries = [
                        "\n".join(line for line in entry.split("\n") if not self.quotes_hidden(line, hidden))
                        for entry in output.traceback
                    ]
                    output.traceback = [entry for entry in entries if entry.strip()]
        return cell, resources


LESSON_DEMO_TAG = "lesson-demo"
NOT_RUN_WHILE_GRADING = "Not run while grading: a demonstration of the lesson, which grades nothing.\n"


class ExecuteLeavingOutLessonDemos(Execute):
    """nbgrader's Execute, which leaves out the cells the course tagged `lesson-demo`:
    demonstrations (processes, plots, MNIST) that grade nothing and define nothing a graded
    cell uses, and that would cost every submission the time of a whole lesson. Their source
    stays, and their output says why it is empty. A grade or solution cell always runs, tag
    or no tag: a student who tags a test cell gains nothing."""

    def preprocess_cell(self, cell, resources, index):
        if LESSON_DEMO_TAG in cell.metadata.get("tags", []) and not (utils.is_grade(cell) or utils.is_solution(cell)):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=NOT_RUN_WHILE_GRADING)]
            cell.execution_count = None
            return cell, resources
        return super().preprocess_cell(cell, resources, index)


class GradeDDPCellsOutOfKernel(NbGraderPreprocessor):
    """Set every DDP grade cell's outputs, and the check cell's, from a grading done outside the kernel.

    Runs in nbgrader's autograde right after Execute. The kernel ran the
    student's notebook, and any cell of the student's could have patched the
    grader there; so this grades the program as the notebook's
    `%%writefile PROGRAM` cell wrote it (taken from the submitted notebook,
    not from a file the kernel could have changed), in the sandbox, once per
    world size the grade cells use, and replaces each grade cell's outputs:
    none when its check passed, the check's message as an error when it
    failed. The check cell shows that grading's report. Whatever the kernel
    printed or patched does not count; under autograde the kernel grades
    nothing itself (client.graded_outside_the_kernel).

    One warm grader does every world size: torch is imported once, and the
    student's own launcher, which starts the same ranks whatever the world
    size, runs once.
    """

    timeout = Float(
        DEFAULT_OPTIONS.timeout_s + 60, help="Seconds one grading may take, the grader's start included"
    ).tag(config=True)

    def preprocess(self, nb, resources):
        exercise = by_assignment(resources.get("nbgrader", {}).get("assignment", ""))
        if exercise is None:
            return nb, resources
        cells = [(cell, self.check_of(cell, exercise)) for cell in nb.cells if utils.is_grade(cell)]
        cells = [(cell, check_id) for cell, check_id in cells if check_id is not None]
        used = [size for cell, _ in cells for size in self.world_sizes(cell.source)]
        world_sizes = list(dict.fromkeys([DEFAULT_WORLD_SIZE, *used]))  # the check cell's first
        reports = self.grade(written_program(nb, exercise.program), exercise, world_sizes)
        for cell, check_id in cells:
            lines = None
            for world_size in self.world_sizes(cell.source):
                lines = lines or self.cell_failure(reports[world_size], check_id, world_size)
            cell.outputs = [] if lines is None else [error_output(lines)]
        for cell in nb.cells:
            if cell.cell_type == "code" and CHECK_CALL.search(cell.source):
                cell.outputs = [report_output(reports[DEFAULT_WORLD_SIZE])]
        nb.metadata[RUNS_METADATA] = {str(size): run_summary(report) for size, report in reports.items()}
        return nb, resources

    @staticmethod
    def cell_failure(report, check_id: str, world_size: int) -> list[str] | None:
        if isinstance(report, list):  # no report: why not, in every cell
            return [f"{heading(check_id, world_size)}: {report[0]}", *report[1:]]
        return failure_lines(report, check_id, world_size)

    @staticmethod
    def check_of(cell, exercise) -> str | None:
        grade_id = cell.metadata["nbgrader"].get("grade_id", "")
        return next((c for c in exercise.graded_checks if exercise.grade_id(c) == grade_id), None)

    @staticmethod
    def world_sizes(source: str) -> list[int]:
        """The world size of each require(...) in the cell: its world_size=, or the default."""
        calls = re.findall(r"require\((.*)\)", source)
        sizes = [
            int(m.group(1)) if (m := re.search(r"world_size\s*=\s*(\d+)", call)) else DEFAULT_WORLD_SIZE
            for call in calls
        ]
        return list(dict.fromkeys(sizes))

    def grade(self, program: str | None, exercise, world_sizes: list[int]) -> dict:
        """world size -> its report, or the lines to show when there is none."""
        if program is None:
            why = [f"There is no %%writefile {exercise.program} cell in the notebook, so there is no program to grade."]
            return dict.fromkeys(world_sizes, why)
        reports = {}
        with tempfile.TemporaryDirectory(prefix="ddp-autograde-") as folder:
            path = Path(folder) / "code" / exercise.program
            path.parent.mkdir()
            path.write_text(program, encoding="utf-8")
            own_launcher = Path(folder) / "own_launcher.json"
            server = autograde_server()
            try:
                for world_size in world_sizes:
                    reports[world_size] = self.grade_one(server, path, exercise, world_size, own_launcher)
            finally:
                server.stop()
        return reports

    def grade_one(self, server: GraderServer, path: Path, exercise, world_size: int, own_launcher: Path):
        report_path = path.parent.parent / f"report-{world_size}.json"
        options = RunOptions(world_size=world_size, sandbox="required")
        own = {"own_launcher_in": str(own_launcher), "own_launcher_out": str(own_launcher)}
        request = grading_request(path, exercise.name, options, str(report_path), **own)
        started = time.monotonic()
        try:
            server.grade(request, self.timeout)
        except GradingFailed as error:
            self.log.error("Grading %s with %d ranks failed: %s", exercise.program, world_size, error)
            return [f"The grader did not finish within {self.timeout:g} s; tell your instructor."]
        self.log.info(
            "Graded %s with %d ranks, out of the kernel, in %.1f s", path.name, world_size, time.monotonic() - started
        )
        error_path = Path(f"{report_path}.error")
        if error_path.exists():
            said = error_path.read_text().strip()
            self.log.error("Grading %s with %d ranks failed: %s", exercise.program, world_size, said[-2000:])
            return ["The grader could not run your program.", said or "It stopped without a report."]
        if not report_path.exists():
            return ["The grader could not run your program.", "It stopped without a report."]
        return json_report.from_dict(json.loads(report_path.read_text()))


# The notebook's check cell: its report, from the grading outside the kernel, is the feedback's.
CHECK_CALL = re.compile(r"^check\(", re.MULTILINE)
# Where the autograded notebook keeps how each of its runs went, for the class report.
RUNS_METADATA = "ddp_grader_runs"


def run_summary(report) -> dict:
    """How one run went: its error, whether it hung, and each failed check's
    message (the checks it never reached apart, as the run's error explains
    them); under "missed", every check that lost its points, with the message
    and hint its grade cell shows."""
    if isinstance(report, list):  # no report at all
        return {"error": " ".join(report), "hung": False, "failed": {}, "not_reached": [], "missed": {}}
    return {
        "error": report.error,
        "hung": any(rank.status == "hung" for rank in report.ranks),
        "failed": {v.id: v.message for v in report.checks if not v.passed and v.reached},
        "not_reached": [v.id for v in report.not_reached],
        "missed": {v.id: {"message": v.message, "hint": v.hint} for v in report.checks if v.status == "failed"},
    }


def report_output(report):
    """The check cell's output: the report as the kernel would have shown it, or why there is none."""
    if isinstance(report, list):
        return nbformat.v4.new_output("stream", name="stdout", text="\n".join(report) + "\n")
    from ..reports import html  # lazily: matplotlib

    return nbformat.v4.new_output(
        "display_data", data={"text/html": html.render(report), "text/plain": f"<report of {report.exercise}>"}
    )


def written_program(nb, program: str) -> str | None:
    """The body of the notebook's last `%%writefile PROGRAM` cell."""
    found = None
    for cell in nb.cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.split()[:2] == ["%%writefile", program]:
            found = body
    return found


def error_output(lines: list[str]):
    """An error output as IPython shows CheckFailed: no stack frames, only the message.
    Its value is the whole message, as str() of the exception is in the kernel: a crashed
    run's cell starts with the check's title alone, and the run's error follows."""
    return nbformat.v4.new_output(
        "error", ename="CheckFailed", evalue="\n".join(lines), traceback=[f"CheckFailed: {lines[0]}", *lines[1:]]
    )

"""Preprocessors the course adds to nbgrader's pipelines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Float, Unicode

from ..exercises import by_assignment
from ..launch import DEFAULT_TIMEOUT_S, DEFAULT_WORLD_SIZE
from ..notebook.grade_cells import failure_lines, heading
from ..reports import json_report


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


class GradeDDPCellsOutOfKernel(NbGraderPreprocessor):
    """Set every DDP grade cell's outputs from a grading done outside the kernel.

    Runs in nbgrader's autograde right after Execute. The kernel ran the
    student's notebook, and any cell of the student's could have patched the
    grader there; so this grades the program as the notebook's
    `%%writefile PROGRAM` cell wrote it (taken from the submitted notebook,
    not from a file the kernel could have changed), with the command-line
    grader in its sandbox, once per world size the grade cells use, and
    replaces each grade cell's outputs: none when its check passed, the
    check's message as an error when it failed. Whatever the kernel printed
    or patched does not count.
    """

    timeout = Float(DEFAULT_TIMEOUT_S + 60, help="Seconds one grading may take, the grader's start included").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        exercise = by_assignment(resources.get("nbgrader", {}).get("assignment", ""))
        if exercise is None:
            return nb, resources
        cells = [(cell, self.check_of(cell, exercise)) for cell in nb.cells if utils.is_grade(cell)]
        cells = [(cell, check_id) for cell, check_id in cells if check_id is not None]
        program = written_program(nb, exercise.program)
        with tempfile.TemporaryDirectory(prefix="ddp-autograde-") as folder:
            reports = {}
            for cell, check_id in cells:
                lines = None
                for world_size in self.world_sizes(cell.source):
                    if world_size not in reports:
                        reports[world_size] = self.grade(program, exercise, world_size, Path(folder))
                    lines = lines or self.cell_failure(reports[world_size], check_id, world_size)
                cell.outputs = [] if lines is None else [error_output(lines)]
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

    def grade(self, program: str | None, exercise, world_size: int, folder: Path):
        """The report of one grading, or the lines to show when there is none."""
        if program is None:
            return [
                f"There is no %%writefile {exercise.program} cell in the notebook, so there is no program to grade."
            ]
        path = folder / str(world_size) / exercise.program
        path.parent.mkdir()
        path.write_text(program, encoding="utf-8")
        report_path = path.with_suffix(".json")
        command = [sys.executable, "-m", "autograder", "check", str(path), "--exercise", exercise.name]
        command += ["--world-size", str(world_size), "--json", str(report_path), "--quiet"]
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout, cwd=path.parent)
        except subprocess.TimeoutExpired:
            return [f"The grader did not finish within {self.timeout:g} s; tell your instructor."]
        seconds = time.monotonic() - started
        self.log.info("Graded %s with %d ranks, out of the kernel, in %.1f s", path.name, world_size, seconds)
        if not report_path.exists():
            said = (done.stderr or done.stdout).strip().splitlines()
            self.log.error("Grading %s with %d ranks failed: %s", exercise.program, world_size, done.stderr[-2000:])
            return ["The grader could not run your program.", *(said[-3:] or ["It stopped without a report."])]
        return json_report.from_dict(json.loads(report_path.read_text()))


def written_program(nb, program: str) -> str | None:
    """The body of the notebook's last `%%writefile PROGRAM` cell."""
    found = None
    for cell in nb.cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.split()[:2] == ["%%writefile", program]:
            found = body
    return found


def error_output(lines: list[str]):
    """An error output as IPython shows CheckFailed: no stack frames, only the message."""
    return nbformat.v4.new_output(
        "error", ename="CheckFailed", evalue=lines[0], traceback=[f"CheckFailed: {lines[0]}", *lines[1:]]
    )

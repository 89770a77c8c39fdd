"""Preprocessors the course adds to nbgrader's pipelines."""

from __future__ import annotations

import re

from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode


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

"""nbgrader configuration of the ddp-course. The repository root is the course directory:

    source/<assignment>/      the instructor's notebooks (solutions and hidden tests)
    release/<assignment>/     what students get (nbgrader generate_assignment <assignment> --force)
    submitted/, autograded/, feedback/, gradebook.db   made by grading (not committed)

Assignments: ddp_intro, linear_regression, mnist_ddp. Add them to the gradebook with
`nbgrader db assignment add <assignment>` (generate_assignment also adds them).
Run nbgrader with the venv's bin on PATH: it shells out to `alembic`.
"""
import os
import re

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, GetGrades, NbGraderPreprocessor

COURSE_DIR = os.path.dirname(os.path.abspath(__file__))
ASSIGNMENTS = ["ddp_intro", "linear_regression", "mnist_ddp"]

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "ddp-course"
c.CourseDirectory.root = COURSE_DIR
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(COURSE_DIR, "gradebook.db")

# Files that running a source notebook in place leaves behind. Never release or copy
# them: linear_regression_ddp.py and mnist_ddp.py are the solution programs written by
# the %%writefile cells, data/ is MNIST, *.pt are checkpoints. While autograding, the
# notebook's %%writefile cell writes the student's program again from the notebook, so
# the program that is graded is always the one in the submitted notebook.
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback",
    "linear_regression_ddp.py", "mnist_ddp.py", "allreduce_demo.py", "data", "*.pt",
]

# The check cell and the first grade cell of a DDP assignment each run the student's
# program (2, then 3 ranks; the report is cached for the other cells). A run takes seconds,
# but a hung one only ends at the grader's deadline (120 s, plus up to 60 s to start the
# grader): that must fit in one cell, and nbgrader's default cell timeout is 30 s.
c.Execute.timeout = 300


class ClearHiddenTestTracebacks(NbGraderPreprocessor):  # (nbconvert's Preprocessor is disabled by default)
    """Remove hidden-test code from the error outputs of grade cells.

    ClearHiddenTests (below) removes the hidden tests from a cell's source, but when a
    hidden assert fails, IPython's traceback in the cell's output quotes its line. This
    drops every traceback line that quotes a line of the cell's hidden-test region, and
    keeps the rest, including the assertion's message, which is written for students.
    It must run before ClearHiddenTests, while the hidden region is still in the source.
    """

    ansi = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    line_number = re.compile(r"^\s*(?:-*>\s*)?\d+\s")  # IPython's "----> 4 " and "      5 "

    def hidden_lines(self, source):
        lines, inside = set(), False
        for line in source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            if inside and line.strip():
                lines.add(line.strip())
            if "END HIDDEN TESTS" in line:
                inside = False
        return lines

    def quotes_hidden(self, line, hidden):
        plain = self.ansi.sub("", line)
        return self.line_number.sub("", plain, count=1).strip() in hidden or plain.strip() in hidden

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell):
            hidden = self.hidden_lines(cell.source)
            for output in cell.get("outputs", []) if hidden else []:
                if output.output_type == "error":
                    entries = ["\n".join(line for line in entry.split("\n") if not self.quotes_hidden(line, hidden))
                               for entry in output.traceback]
                    output.traceback = [entry for entry in entries if entry.strip()]
        return cell, resources


# Feedback never shows hidden tests: not their source, not their lines in tracebacks.
c.GenerateFeedback.preprocessors = [
    GetGrades,
    ClearHiddenTestTracebacks,
    ClearHiddenTests,
    CSSHTMLHeaderPreprocessor,
]

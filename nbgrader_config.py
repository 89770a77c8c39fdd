"""nbgrader configuration of the ddp-course. The repository root is the course directory:

    source/<assignment>/      the instructor's notebooks (solutions and hidden tests)
    release/<assignment>/     what students get (nbgrader generate_assignment <assignment> --force)
    submitted/, autograded/, feedback/, gradebook.db   made by grading (not committed)

Assignments: autograder.exercises.ASSIGNMENTS. Add them to the gradebook with
`nbgrader db assignment add <assignment>` (generate_assignment also adds them).
Run nbgrader with the venv's bin on PATH: it shells out to `alembic`.
"""

import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.converters import Autograde
from nbgrader.preprocessors import ClearHiddenTests, Execute, GetGrades

from autograder.exercises import LEFT_BY_RUNNING
from autograder.nbgrader_ext.kernel import SandboxedKernelManager
from autograder.nbgrader_ext.preprocessors import (
    ClearHiddenTestTracebacks,
    ExecuteLeavingOutLessonDemos,
    GradeDDPCellsOutOfKernel,
)

COURSE_DIR = os.path.dirname(os.path.abspath(__file__))

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "ddp-course"
c.CourseDirectory.root = COURSE_DIR
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(COURSE_DIR, "gradebook.db")

# Never release or copy what running a source notebook in place leaves behind: the
# solution programs its %%writefile cells wrote, MNIST, checkpoints. While autograding,
# the notebook's %%writefile cell writes the student's program again from the notebook,
# so the program that is graded is always the one in the submitted notebook.
c.CourseDirectory.ignore = [*LEFT_BY_RUNNING, "feedback"]

# The check cell and the first grade cell of a DDP assignment each run the student's
# program (2, then 3 ranks; the report is cached for the other cells). A run takes seconds,
# but a hung one only ends at the grader's deadline (120 s, plus up to 60 s to start the
# grader): that must fit in one cell, and nbgrader's default cell timeout is 30 s.
c.Execute.timeout = 300

# The DDP grade cells' outputs come from a grading outside the kernel, in the sandbox, of the
# program the notebook's %%writefile cell holds: right after nbgrader runs the notebook, and
# before it reads the grades. A cell of the student's that patches the grader in the kernel
# changes nothing.
# Cells tagged `lesson-demo` (a lesson's demonstrations: processes, plots) are not run while
# grading: they grade nothing, and cost each submission the time of the lesson.
_steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
_execute = _steps.index(Execute)
c.Autograde.autograde_preprocessors = [
    *_steps[:_execute],
    ExecuteLeavingOutLessonDemos,
    GradeDDPCellsOutOfKernel,
    *_steps[_execute + 1 :],
]

# The kernel that runs a student's notebook is sandboxed (autograder/nbgrader_ext/kernel.py): it
# sees that student's folder only, not gradebook.db, source/ or other students, and nothing it
# starts outlives it.
c.Execute.kernel_manager_class = SandboxedKernelManager

# Feedback never shows hidden tests: not their source, not their lines in tracebacks.
c.GenerateFeedback.preprocessors = [
    GetGrades,
    ClearHiddenTestTracebacks,
    ClearHiddenTests,
    CSSHTMLHeaderPreprocessor,
]

# The exchange (a hub's release, submit, collect and feedback) counts a submission only when the
# student it names made all of it, and copies it without following a link: a student can hand in
# neither in another's name nor a link to the course's files (autograder/nbgrader_ext/exchange.py).
# Its root is the hub's to set (hub/), for every user alike.
c.ExchangeFactory.collect = "autograder.nbgrader_ext.exchange.OwnedSubmissionsCollect"

"""The exercises: each one a single record that the grader, nbgrader's
config, the grade-cell tool, the demo, the tests and the README read.

Adding an exercise is its record here, its notebook, its solution and its
sample students.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .datasets import provide_mnist
from .judge.checks import EVALUATION_CHANGE, TORCHRUN_CHANGE, Check, all_checks, by_id


@dataclass(frozen=True)
class Exercise:
    name: str  # what --exercise takes
    assignment: str  # the nbgrader assignment: source/<assignment>/<assignment>.ipynb
    program: str  # the file the notebook's %%writefile cell writes, and the grade cells check
    grade_id_prefix: str  # of the grade cells' ids: <prefix>_<check id>
    solution: str  # the reference program, from the course root
    prepare: Callable[[Path], None]  # fills the ranks' empty working folder with the data it needs
    launcher: str  # the kind of launcher that starts its ranks (autograder.launch.LAUNCHERS)
    # Which checks apply, from every check in the report's order: read from the
    # registry each time, so a new check needs no edit here.
    choose_checks: Callable[[list[Check]], tuple[str, ...]]
    # The test set the grader evaluates the final model on, for distributed_eval (rank/probes/evaluation.py).
    evaluation: str = ""

    @property
    def checks(self) -> tuple[str, ...]:
        """The checks that apply, in the report's order."""
        return self.choose_checks(all_checks())

    @property
    def notebook(self) -> str:
        return f"source/{self.assignment}/{self.assignment}.ipynb"

    @property
    def graded_checks(self) -> tuple[str, ...]:
        """The checks with a grade cell in the notebook."""
        return tuple(c for c in self.checks if by_id(c).graded)

    def grade_id(self, check_id: str) -> str:
        return f"{self.grade_id_prefix}_{check_id}"


def _nothing(_workdir: Path) -> None:
    pass


def _mnist(workdir: Path) -> None:
    # torchvision's MNIST(root="data", download=True) finds the bundled
    # 2,000-image subset here and loads it through its own code.
    provide_mnist(workdir / "data")


def spawned_checks(checks: list[Check]) -> tuple[str, ...]:
    """The checks of a program whose ranks main(rank, world_size) runs: all but torchrun's and the evaluation's."""
    return tuple(c.id for c in checks if c.change not in (TORCHRUN_CHANGE, EVALUATION_CHANGE))


def evaluated_checks(checks: list[Check]) -> tuple[str, ...]:
    """The same, for a program that also evaluates its model on a test set."""
    return tuple(c.id for c in checks if c.change != TORCHRUN_CHANGE)


# What the fault-tolerance exercise is also judged on, as a program of the mp exercises is.
ALSO_UNDER_TORCHRUN = ("weights_in_sync", "rank0_logs", "cleanup")


def torchrun_checks(checks: list[Check]) -> tuple[str, ...]:
    """The checks of a program that torchrun starts: torchrun's, then those it shares."""
    return (*(c.id for c in checks if c.change == TORCHRUN_CHANGE), *ALSO_UNDER_TORCHRUN)


EXERCISES = {
    e.name: e
    for e in (
        Exercise(
            "linear_regression",
            "linear_regression",
            "linear_regression_ddp.py",
            "lr",
            "solutions/linear_regression_ddp.py",
            _nothing,
            "mp",
            spawned_checks,
        ),
        Exercise(
            "mnist",
            "mnist_ddp",
            "mnist_ddp.py",
            "mnist",
            "solutions/mnist_ddp.py",
            _mnist,
            "mp",
            evaluated_checks,
            evaluation="mnist",
        ),
        Exercise(
            "fault_tolerance",
            "fault_tolerance",
            "fault_tolerance.py",
            "ft",
            "solutions/fault_tolerance.py",
            _nothing,
            "torchrun",
            torchrun_checks,
        ),
    )
}

# The course's assignments in teaching order: a lesson, then the exercises.
ASSIGNMENTS = ("ddp_intro", *(e.assignment for e in EXERCISES.values()))

# What running the source notebooks in place leaves beside them: never released, never copied.
# The ddp_intro lesson writes allreduce_demo.py, ddp_by_hand.py and speedup_demo.py, the
# fault_tolerance lesson show_env.py and a snapshot's temporary file; the exercises write their programs.
LEFT_BY_RUNNING = (
    ".ipynb_checkpoints",
    "__pycache__",
    "*.pyc",
    "data",
    "*.pt",
    "*.tmp",
    "allreduce_demo.py",
    "ddp_by_hand.py",
    "speedup_demo.py",
    "show_env.py",
    *(e.program for e in EXERCISES.values()),
)


def by_assignment(assignment: str) -> Exercise | None:
    return next((e for e in EXERCISES.values() if e.assignment == assignment), None)

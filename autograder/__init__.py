"""ddp-course autograder: run a student's DDP code in real ranks and judge
what each rank did.

    from autograder import RunOptions, grade
    report = grade("linear_regression_ddp.py", "linear_regression", RunOptions(world_size=3))

Names are imported on first use, so `from autograder.notebook import check`
does not pull torch into a notebook kernel.
"""

from importlib import import_module

_EXPORTS = {"grade": ".grading", "RunOptions": ".schema.run", "Report": ".judge.verdict", "CannotGrade": ".errors"}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

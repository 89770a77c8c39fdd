"""ddp-course autograder: run a student's DDP code in real ranks and judge
what each rank did.

    from autograder import grade
    report = grade("linear_regression_ddp.py", exercise="linear_regression", world_size=2)
"""
from .errors import CannotGrade
from .grading import grade
from .verdict import Report

__all__ = ["grade", "Report", "CannotGrade"]

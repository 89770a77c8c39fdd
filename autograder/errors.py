"""Errors that stop grading before any rank runs. Each carries its own text."""


class CannotGrade(Exception):
    """The grader cannot grade at all: exit status 2 (usage, unreadable file)."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint

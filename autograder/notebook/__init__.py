"""The notebook side: checking from a kernel, and nbgrader's grade cells.

    from autograder.notebook import check
    check("linear_regression_ddp.py", exercise="linear_regression")

The grading runs outside the kernel, in a warm grader process
(autograder.notebook.server) started when `check` is imported: nothing
a submission does (a crash, os._exit, C++ warnings on stderr, a hang) can
reach the kernel or its cell output, and after the first check no time goes
into starting Python and importing torch again.
"""

from __future__ import annotations

from ..judge.verdict import Report
from . import client


def _report_html(report: Report) -> str:
    from ..reports import html  # lazily: matplotlib is imported only when a report is shown

    return html.render(report)


def _show_reports_as_html() -> None:
    """Teach IPython to draw a Report as the HTML report (the judge knows nothing of views)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(Report, _report_html)


def __getattr__(name):
    # `from autograder.notebook import check` warms the grader up while the
    # student reads the next cell. Importing the package alone starts nothing:
    # the server itself lives in it.
    if name == "check":
        _show_reports_as_html()
        client.start()
        return client.check
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The verdict as Gradescope's results.json: what its "Upload Autograder"
harness reads back from /autograder/results/results.json.

One test per graded check and world size, as the nbgrader grade cells have:
the 2-rank run is visible at once, the 3-rank run (the hidden tests) only
after the grades are published. A check's points count only when it passes
at both world sizes, as in nbgrader, so the top-level `score` is the total
and each 3-rank test is worth 0 on its own: its failure shows in the total.

Whatever happens, a results file is written: a submission that cannot be
graded, and the grader's own failure, each get one that says so.
"""

from __future__ import annotations

import json
import os

from .._files import write_text
from ..exercises import Exercise
from ..judge.checks import by_id
from ..judge.verdict import Report, Verdict
from ..schema.run import DEFAULT_WORLD_SIZE, HIDDEN_WORLD_SIZE
from ..wording import plural, points, unsandboxed_note

VISIBLE, HIDDEN = "visible", "after_published"
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
STATUSES = ("passed", "failed")
SCORING = (
    f"Each check's points count when it passes with {plural(DEFAULT_WORLD_SIZE, 'rank')} and with "
    f"{HIDDEN_WORLD_SIZE}; the {HIDDEN_WORLD_SIZE}-rank results show once the grades are published."
)
GRADER_FAILED = (
    "The autograder itself failed while grading your upload. This is not a problem in your code: "
    "your instructor has the details and will grade it again."
)


def _test(name: str, score: float, max_score: float, passed: bool, output: str, visibility: str) -> dict:
    return {
        "name": name,
        "score": score,
        "max_score": max_score,
        "status": "passed" if passed else "failed",
        "output": output,
        "visibility": visibility,
    }


def _verdict_text(verdict: Verdict) -> str:
    return verdict.message if verdict.passed else f"{verdict.message}\n\n**Hint:** {verdict.hint}"


def _tests(exercise: Exercise, visible: Report, hidden: Report) -> list[dict]:
    tests, later = [], []
    for check_id in exercise.graded_checks:
        check, shown, unseen = by_id(check_id), visible.check(check_id), hidden.check(check_id)
        name = f"{check.change}: {check.title}"
        tests.append(
            _test(
                f"{name} ({plural(DEFAULT_WORLD_SIZE, 'rank')})",
                check.points if shown.passed else 0,
                check.points,
                shown.passed,
                _verdict_text(shown),
                VISIBLE,
            )
        )
        output = _verdict_text(unseen)
        if shown.passed and not unseen.passed:
            output += f"\n\nSo the check's {plural(check.points, 'point')} are not counted."
        later.append(_test(f"{name} ({plural(HIDDEN_WORLD_SIZE, 'rank')})", 0, 0, unseen.passed, output, HIDDEN))
    return tests + later


def _score(exercise: Exercise, reports: list[Report]) -> float:
    return sum(by_id(c).points for c in exercise.graded_checks if all(report.check(c).passed for report in reports))


def max_score(exercise: Exercise) -> float:
    return sum(by_id(c).points for c in exercise.graded_checks)


def _run_problem(report: Report) -> str:
    if report.error is None:
        return ""
    hint = f"\n\n**Hint:** {report.error_hint}" if report.error_hint else ""
    return f"\n\n**The {plural(report.world_size, 'rank')} run stopped:**\n\n```\n{report.error}\n```{hint}"


def results(exercise: Exercise, reports: dict[int, Report], notes: list[str], seconds: float) -> dict:
    """The results of a grading at DEFAULT_WORLD_SIZE and HIDDEN_WORLD_SIZE."""
    visible, hidden = reports[DEFAULT_WORLD_SIZE], reports[HIDDEN_WORLD_SIZE]
    score = _score(exercise, [visible, hidden])
    lines = [
        f"## {exercise.name}: {points(score)} / {points(max_score(exercise))}",
        *notes,
        SCORING,
        *([unsandboxed_note(visible)] if visible.unsandboxed else []),
    ]
    return {
        "score": score,
        "execution_time": round(seconds),
        "output": "\n\n".join(lines) + _run_problem(visible),
        "output_format": "md",
        "test_output_format": "md",
        "tests": _tests(exercise, visible, hidden),
    }


def not_graded(exercise: Exercise, message: str, hint: str, seconds: float) -> dict:
    """The upload could not be graded at all (no program in it, no main, ...): every check gets 0."""
    output = f"{message}\n\n**Hint:** {hint}" if hint else message
    return {
        "score": 0,
        "execution_time": round(seconds),
        "output": f"## {exercise.name}: 0 / {points(max_score(exercise))}\n\n{output}",
        "output_format": "md",
        "test_output_format": "md",
        "tests": [
            _test(f"{by_id(c).change}: {by_id(c).title}", 0, by_id(c).points, False, "Not graded: see above.", VISIBLE)
            for c in exercise.graded_checks
        ],
    }


def grader_failed(seconds: float) -> dict:
    return {"score": 0, "execution_time": round(seconds), "output": GRADER_FAILED, "output_format": "md", "tests": []}


def problems(results: dict) -> list[str]:
    """Where `results` breaks Gradescope's specification of results.json: its fields and their types."""
    found = []
    number = (int, float)
    expected = {"score": number, "execution_time": number, "output": str, "output_format": str, "tests": list}
    for key, kinds in expected.items():
        if key in results and (not isinstance(results[key], kinds) or isinstance(results[key], bool)):
            found.append(f"{key} is a {type(results[key]).__name__}")
    if "score" not in results and not all("score" in t for t in results.get("tests", [])):
        found.append("no score: neither at the top nor on every test")
    for index, test in enumerate(results.get("tests", [])):
        for key, kinds in {"name": str, "score": number, "max_score": number, "output": str}.items():
            if not isinstance(test.get(key), kinds) or isinstance(test.get(key), bool):
                found.append(f"tests[{index}].{key} is missing or not a {kinds}")
        if test.get("status", "passed") not in STATUSES:
            found.append(f"tests[{index}].status is {test['status']!r}")
        if test.get("visibility", VISIBLE) not in VISIBILITIES:
            found.append(f"tests[{index}].visibility is {test['visibility']!r}")
    return found


def write(results: dict, path: str | os.PathLike) -> None:
    """Atomically, over whatever is there: a reader never sees half a file."""
    write_text(path, json.dumps(results, indent=2))

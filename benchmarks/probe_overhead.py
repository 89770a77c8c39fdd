"""Grading wall time of this tree over that of an earlier revision, on the
same correct submissions: what new probes and checks cost.

    .venv/bin/python benchmarks/probe_overhead.py --baseline REV [--rounds N] [--exercise NAME]

REV is checked out in a temporary git worktree; both trees grade with this
virtual environment, alternately, ROUNDS times per exercise, and each figure
is the ratio of the medians (this tree / REV). A ratio of neighbours in one
run, because the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from revision import checked_out

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = {"linear_regression": "solutions/linear_regression_ddp.py", "mnist": "solutions/mnist_ddp.py"}


def graded_in(tree: Path, exercise: str) -> float:
    command = [sys.executable, "-m", "autograder", "check", str(ROOT / SOLUTIONS[exercise])]
    started = time.perf_counter()
    done = subprocess.run([*command, "--exercise", exercise, "--quiet"], cwd=tree, capture_output=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"grading in {tree} failed ({done.returncode}): {done.stdout[-2000:]!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--exercise", choices=list(SOLUTIONS), action="append", help="default: both")
    args = parser.parse_args()
    with checked_out(args.baseline) as baseline:
        for exercise in args.exercise or SOLUTIONS:
            now, before = [], []
            for _ in range(args.rounds):
                before.append(graded_in(baseline, exercise))
                now.append(graded_in(ROOT, exercise))
            ratio = statistics.median(now) / statistics.median(before)
            print(
                f"{exercise:18} this tree {statistics.median(now):6.2f} s, {args.baseline} "
                f"{statistics.median(before):6.2f} s (medians of {args.rounds}): ratio {ratio:.3f}"
            )


if __name__ == "__main__":
    main()

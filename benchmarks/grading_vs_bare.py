"""Grading wall time over the bare run of the same correct 2-rank submission.

bare:    python linear_regression_ddp.py            (its own mp.spawn, 2 ranks)
grading: python -m autograder check linear_regression_ddp.py --exercise linear_regression

The two are run alternately, ROUNDS times, in one session, and the figure is
the ratio of their medians: the machine is shared and noisy, so absolute
seconds from different moments are not comparable, but a ratio of
neighbours is. Since the launcher check, grading includes one run of the
file's own launcher, which is itself the bare run (after the graded ranks).
With --baseline REV, the grading of an earlier revision (checked out beside
this tree) runs in the same rounds too, so a change's cost is measured
against the same bare runs.
Run:  .venv/bin/python benchmarks/grading_vs_bare.py [--rounds N] [--baseline REV]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from revision import checked_out

ROOT = Path(__file__).resolve().parents[1]
SUBMISSION = ROOT / "solutions" / "linear_regression_ddp.py"


def timed(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--baseline", metavar="REV", help="also time the grading of this git revision")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        trees = {"this tree": ROOT}
        if args.baseline:
            trees = {args.baseline: stack.enter_context(checked_out(args.baseline)), **trees}
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        script = folder / SUBMISSION.name
        shutil.copy(SUBMISSION, script)
        grade_command = [
            sys.executable, "-m", "autograder", "check", str(script), "--exercise", "linear_regression",
            "--world-size", str(args.world_size), "--quiet",
        ]  # fmt: skip
        bare, grading = [], {name: [] for name in trees}
        for _ in range(args.rounds):
            bare.append(timed([sys.executable, str(script)], folder))
            for name, tree in trees.items():
                grading[name].append(timed(grade_command, tree))
    show("bare run", bare)
    for name, times in grading.items():
        show(f"grading, {name}", times)
        ratio = statistics.median(times) / statistics.median(bare)
        print(f"ratio grading / bare, {name}: {ratio:.2f}   (graded ranks + one run of the file's own launcher)")


def show(name: str, times: list[float]) -> None:
    print(f"{name:24} median {statistics.median(times):6.2f} s   runs: {', '.join(f'{t:.2f}' for t in times)}")


if __name__ == "__main__":
    main()

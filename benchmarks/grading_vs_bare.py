"""Grading wall time over the bare run of the same correct 2-rank submission.

bare:    python linear_regression_ddp.py            (its own mp.spawn, 2 ranks)
grading: python -m autograder check linear_regression_ddp.py --exercise linear_regression

The two are run alternately, ROUNDS times, in one session, and the figure is
the ratio of their medians: the machine is shared and noisy, so absolute
seconds from different moments are not comparable, but a ratio of
neighbours is. Since the launcher check, grading includes one run of the
file's own launcher, which is itself the bare run (after the graded ranks).
Run:  .venv/bin/python benchmarks/grading_vs_bare.py [--rounds N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        script = folder / SUBMISSION.name
        shutil.copy(SUBMISSION, script)
        bare_command = [sys.executable, str(script)]
        grade_command = [
            sys.executable,
            "-m",
            "autograder",
            "check",
            str(script),
            "--exercise",
            "linear_regression",
            "--world-size",
            str(args.world_size),
            "--quiet",
        ]
        bare, grading = [], []
        for _ in range(args.rounds):
            bare.append(timed(bare_command, folder))
            grading.append(timed(grade_command, ROOT))
    ratio = statistics.median(grading) / statistics.median(bare)
    print(f"bare run     median {statistics.median(bare):6.2f} s   runs: {', '.join(f'{t:.2f}' for t in bare)}")
    print(f"grading      median {statistics.median(grading):6.2f} s   runs: {', '.join(f'{t:.2f}' for t in grading)}")
    print(f"ratio grading / bare: {ratio:.2f}   (grading = graded ranks + one bare run of the file's own launcher)")


if __name__ == "__main__":
    main()

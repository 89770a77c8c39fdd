"""Check latency in a live Jupyter kernel, over the bare run of the same code.

A kernel is started once and imports torch, as a student's kernel has. Then,
alternately, ROUNDS times:
  check:  autograder.notebook.check(file, "linear_regression") in the kernel
          (a fresh copy of the file each round, so the kernel's cache is not used)
  bare:   python linear_regression_ddp.py (its own mp.spawn, 2 ranks)
The figure is the ratio of the medians, measured in one session.
Run:  .venv/bin/python benchmarks/check_latency_in_kernel.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[1]
SUBMISSION = ROOT / "solutions" / "linear_regression_ddp.py"


def run_in_kernel(client, code: str) -> None:
    reply = client.execute_interactive(code, timeout=300, output_hook=lambda message: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(reply["content"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            run_in_kernel(client, f"import os, torch; os.chdir({str(folder)!r}); from autograder.notebook import check")
            checks, bares = [], []
            for number in range(args.rounds):
                copy = folder / f"linear_regression_ddp_{number}.py"
                copy.write_text(SUBMISSION.read_text() + f"\n# copy {number}\n")
                started = time.perf_counter()
                run_in_kernel(
                    client, f"report = check({copy.name!r}, 'linear_regression'); assert report.passed, report.error"
                )
                checks.append(time.perf_counter() - started)
                started = time.perf_counter()
                subprocess.run([sys.executable, str(copy)], cwd=folder, check=True, capture_output=True)
                bares.append(time.perf_counter() - started)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    print(
        f"check in a live kernel  median {statistics.median(checks):6.2f} s   runs: "
        f"{', '.join(f'{t:.2f}' for t in checks)}"
    )
    print(
        f"bare run                median {statistics.median(bares):6.2f} s   runs: "
        f"{', '.join(f'{t:.2f}' for t in bares)}"
    )
    print(f"ratio check / bare: {statistics.median(checks) / statistics.median(bares):.2f}")


if __name__ == "__main__":
    main()

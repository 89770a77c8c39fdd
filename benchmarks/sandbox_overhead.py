"""What the sandbox costs: grading the correct 2-rank linear regression in the
sandbox over grading it with --unsafe-no-sandbox, alternately, in one run.

  cli:      python -m autograder check FILE --exercise linear_regression
  notebook: a request to the warm grader that autograder.notebook.check uses
            (it imported torch once; each check forks from it)

Each figure is the ratio of the medians (sandboxed / unsandboxed).
Run as root on Linux:  .venv/bin/python benchmarks/sandbox_overhead.py [--rounds N] [--unprivileged]
(--unprivileged: the whole benchmark as `nobody`, whose sandbox is a user namespace)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.notebook.client import GraderServer, grading_request
from autograder.schema.run import RunOptions

ROOT = Path(__file__).resolve().parents[1]
SUBMISSION = ROOT / "solutions" / "linear_regression_ddp.py"


def cli(sandboxed: bool) -> float:
    command = [sys.executable, "-m", "autograder", "check", str(SUBMISSION), "--exercise", "linear_regression"]
    started = time.perf_counter()
    done = subprocess.run([*command, "--quiet", *([] if sandboxed else ["--unsafe-no-sandbox"])], cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"grading failed ({done.returncode})")
    return time.perf_counter() - started


def notebook(server: GraderServer, folder: Path, sandboxed: bool) -> float:
    options = RunOptions(sandbox="required" if sandboxed else "off")
    request = grading_request(SUBMISSION, "linear_regression", options, str(folder / "report.json"))
    started = time.perf_counter()
    if server.grade(request, 300) != 0:
        raise SystemExit("grading failed")
    return time.perf_counter() - started


def ratio(name: str, timings: dict[bool, list[float]]) -> None:
    inside, outside = statistics.median(timings[True]), statistics.median(timings[False])
    print(f"{name}: sandboxed {inside:.2f} s, unsandboxed {outside:.2f} s, ratio {inside / outside:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--unprivileged", action="store_true", help="run as nobody (needs root to start)")
    args = parser.parse_args()
    if args.unprivileged and os.geteuid() == 0:
        sys.path.insert(0, str(ROOT / "tests"))
        import unprivileged

        again = [sys.executable, __file__, "--rounds", str(args.rounds), "--unprivileged"]
        raise SystemExit(subprocess.run(again, cwd=ROOT, preexec_fn=unprivileged.become_nobody).returncode)
    timings = {True: [], False: []}
    for _ in range(args.rounds):
        for sandboxed in (True, False):
            timings[sandboxed].append(cli(sandboxed))
    ratio("cli", timings)
    server, timings = GraderServer(), {True: [], False: []}
    try:
        with tempfile.TemporaryDirectory() as folder:
            notebook(server, Path(folder), True)  # the server's first answer waits for torch's import
            for _ in range(args.rounds):
                for sandboxed in (True, False):
                    timings[sandboxed].append(notebook(server, Path(folder), sandboxed))
    finally:
        server.stop()
    ratio("notebook", timings)


if __name__ == "__main__":
    main()

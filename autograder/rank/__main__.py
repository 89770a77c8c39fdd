"""`python -m autograder.rank SPEC [--rank N]`: run one rank from a spec file.

Without --rank, the rank comes from RANK, as torchrun and srun-started
agents set it.
"""

import argparse
import os
from pathlib import Path

from .runner import run_rank
from .spec import RankSpec


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m autograder.rank", description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="the RankSpec JSON file the launcher wrote")
    parser.add_argument("--rank", type=int, default=None, help="this rank's number (default: $RANK)")
    args = parser.parse_args(argv)
    rank = args.rank if args.rank is not None else int(os.environ["RANK"])
    run_rank(rank, RankSpec.from_json(args.spec.read_text()))  # exits the process itself


if __name__ == "__main__":
    main()

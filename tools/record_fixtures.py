"""`python -m tools.record_fixtures [NAME ...]`: record real runs of the check
catalogue as fixtures for the judge's fast tests (tests/test_judge.py).

Each row of tests/test_checks.py's TABLE (a catalogue submission at a world
size) is run once with real ranks, and the records the checks read are saved
as tests/fixtures/runs/<exercise>__<submission>@<world size>.json.gz. The
tests then judge those records in milliseconds. Re-record after a change to a
probe or to the event schema; a test fails while any fixture no longer fits
the schema. Only the ranks' printed output is trimmed (to its last
OUTPUT_CHARS characters): no check reads it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

from autograder.grading import record

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures" / "runs"
OUTPUT_CHARS = 2000


def fixture_name(row) -> str:
    return f"{row.exercise}__{row.id.split('/', 1)[1]}"


def fixture_path(row) -> Path:
    return FIXTURES / f"{fixture_name(row)}.json.gz"


def _catalogue():
    sys.path.insert(0, str(TESTS))  # the catalogue lives with the tests
    import mistakes
    import test_checks

    return mistakes, test_checks


def save(run, path: Path) -> None:
    data = run.to_dict()
    for outcome in (data["launch"] or {}).get("ranks", []):
        outcome["output"] = outcome["output"][-OUTPUT_CHARS:]
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # no timestamp: the same records give the same bytes
        f.write(text.encode())


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.record_fixtures", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only these fixtures (names as in tests/fixtures/runs/)")
    args = parser.parse_args(argv)
    mistakes, test_checks = _catalogue()
    with tempfile.TemporaryDirectory() as folder:
        for row in test_checks.TABLE:
            if args.names and fixture_name(row) not in args.names:
                continue
            if row.submission == "reference":
                path = test_checks.REFERENCES[row.exercise]
            else:
                path = mistakes.write_submission(f"{row.exercise}/{row.submission}", Path(folder) / row.exercise)
            _, run = record(path, row.exercise, world_size=row.world_size, backend="gloo")
            save(run, fixture_path(row))
            print(f"recorded {fixture_path(row).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

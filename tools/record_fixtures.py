"""`python -m tools.record_fixtures [NAME ...]`: record real runs of the check
catalogue as fixtures for the judge's fast tests (tests/test_judge.py).

Each row of tests/test_checks.py's TABLE (a catalogue submission at a world
size) is run once with real ranks (gloo), and the records the checks read are
saved as tests/fixtures/runs/<exercise>__<submission>@<world size>.json.gz:
`RunRecords.to_dict()` as compact JSON with sorted keys, gzipped without a
timestamp, so recording the same run again changes only its times. NAMEs (as
in that folder, without .json.gz) record only those rows. Re-record after a
change to a probe, to the event schema or to a catalogue submission: the tests
fail while a fixture no longer fits the schema or was recorded from another
version of its submission (each fixture keeps the SHA-256 of the source it
ran and of what recorded it, under "recorded_from", which
`RunRecords.from_dict` ignores). What recorded it is the rank's probes and
the event schema (`producer_sha256`): a fixture recorded by other probes
than today's is stale, and the fast tests say so.

To keep the folder small, what no check reads is trimmed:
- each rank's printed output (and the student's launcher's), to its last
  OUTPUT_CHARS characters;
- the indices of a rank's plain-sampler epochs after the first
  PARTITION_EPOCHS (the checks read only the first; the report draws the
  first PARTITION_EPOCHS);
- the losses of every rank but rank 0 (the training check reads rank 0's; the
  report's loss chart then shows rank 0 alone).
A trimmed run must get the same verdicts as the run itself, or nothing is saved.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from autograder.exercises import EXERCISES
from autograder.grading import PARTITION_EPOCHS, record
from autograder.judge.checks import run_checks
from autograder.judge.records import RunRecords
from autograder.schema.run import RunOptions

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures" / "runs"
OUTPUT_CHARS = 2000
RERECORD = "re-record with `python -m tools.record_fixtures"
# What writes the records a fixture holds: a change to any of these makes every fixture stale.
PRODUCERS = (ROOT / "autograder" / "rank" / "probes", ROOT / "autograder" / "schema" / "events.py")


def fixture_name(row) -> str:
    return f"{row.exercise}__{row.id.split('/', 1)[1]}"


def fixture_path(row) -> Path:
    return FIXTURES / f"{fixture_name(row)}.json.gz"


def catalogue():
    """tests/mistakes.py and tests/test_checks.py, which live with the tests."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import mistakes
    import test_checks

    return mistakes, test_checks


def source(row) -> str:
    """The code the row's run grades."""
    mistakes, test_checks = catalogue()
    if row.submission == "reference":
        return test_checks.REFERENCES[row.exercise].read_text()
    return mistakes.SUBMISSIONS[f"{row.exercise}/{row.submission}"].source()


def source_sha256(row) -> str:
    return hashlib.sha256(source(row).encode()).hexdigest()


def producer_sha256() -> str:
    """One hash of the probes' sources and the event schema, file by file."""
    digest = hashlib.sha256()
    for root in PRODUCERS:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            text = path.read_bytes()
            digest.update(f"{path.relative_to(root.parent)}\0{len(text)}\0".encode() + text)
    return digest.hexdigest()


def recorded_from(row) -> dict:
    return {"submission": row.id, "sha256": source_sha256(row), "producers": producer_sha256()}


def why_stale(row, saved: dict) -> str | None:
    """Why a fixture no longer shows what its row's run records today; None if it does."""
    stamp = saved.get("recorded_from", {})
    if stamp.get("sha256") != source_sha256(row):
        return "recorded from another version of the submission"
    if stamp.get("producers") != producer_sha256():
        return "recorded by other probes or another event schema than today's (autograder/rank/probes/, events.py)"
    return None


def trimmed(data: dict) -> dict:
    """`RunRecords.to_dict()` without what no check reads (see the module docstring)."""
    data = copy.deepcopy(data)
    outcomes = _outcomes(data["launch"]) if data["launch"] else []
    if data.get("own_launcher") and data["own_launcher"]["outcome"]:
        outcomes.append(data["own_launcher"]["outcome"])
    for outcome in outcomes:
        outcome["output"] = outcome["output"][-OUTPUT_CHARS:]
    for rank in data["ranks"]:
        plain = [e for e in rank["events"] if e["kind"] == "plain_sampler_epoch"]
        for epoch in plain[PARTITION_EPOCHS:]:
            epoch["indices"] = []
        if rank["rank"] != 0:
            for end in (e for e in rank["events"] if e["kind"] == "training_end"):
                end["losses"] = []
    return data


def _outcomes(launch: dict) -> list[dict]:
    """Every process's outcome in a saved launch: its ranks, a torchrun job's
    attempts and agents, and the grading's other torchrun jobs."""
    found = [*launch["ranks"], *launch["agents"], *(o for attempt in launch["attempt_outcomes"] for o in attempt)]
    return found + [o for job in launch["jobs"].values() for o in _outcomes(job)]


def verdicts(run: RunRecords) -> list:
    return run_checks(run, EXERCISES[run.exercise].checks)


def save(run: RunRecords, path: Path, recorded_from: dict | None = None) -> dict:
    data = trimmed(run.to_dict())
    if verdicts(RunRecords.from_dict(data)) != verdicts(run):
        raise AssertionError(f"{path.name}: trimming changed a verdict; trim less in tools/record_fixtures.py")
    if recorded_from is not None:
        data["recorded_from"] = recorded_from
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # no timestamp: the same records give the same bytes
        f.write(text.encode())
    return data


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.record_fixtures", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only these fixtures (names as in tests/fixtures/runs/)")
    args = parser.parse_args(argv)
    mistakes, test_checks = catalogue()
    rows = [row for row in test_checks.TABLE if not args.names or fixture_name(row) in args.names]
    unknown = sorted(set(args.names) - {fixture_name(row) for row in rows})
    if unknown:
        parser.error(f"no catalogue row for {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as folder:
        for row in rows:
            if row.submission == "reference":
                path = test_checks.REFERENCES[row.exercise]
            else:
                path = mistakes.write_submission(f"{row.exercise}/{row.submission}", Path(folder) / row.exercise)
            _, run = record(path, row.exercise, RunOptions(world_size=row.world_size, backend="gloo"))
            save(run, fixture_path(row), recorded_from(row))
            print(f"recorded {fixture_path(row).relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

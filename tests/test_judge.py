"""The checks on recorded runs: no ranks start, so each test takes
milliseconds. The fixtures are real runs of the catalogue's submissions
(tests/fixtures/runs/, written by `python -m tools.record_fixtures`); the edge
cases below edit them into what real ranks reach only slowly or by chance."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
from test_checks import TABLE

from autograder.exercises import EXERCISES
from autograder.grading import judge
from autograder.judge import events
from autograder.judge.checks import run_checks
from autograder.judge.records import RunRecords
from autograder.launch import RankStatus
from autograder.submission import Submission
from tools.record_fixtures import FIXTURES, fixture_path, load

RECORDED = [pytest.param(row, id=row.id) for row in TABLE]


def verdicts(data: dict) -> dict:
    run = RunRecords.from_dict(data)
    return {v.id: v for v in run_checks(run, EXERCISES[run.exercise].checks)}


def statuses(found: dict, status: str) -> set[str]:
    return {check_id for check_id, v in found.items() if v.status == status}


@pytest.fixture(scope="module")
def fixture():
    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = load(FIXTURES / f"{name}.json.gz")
        return copy.deepcopy(cache[name])

    return get


REFERENCE = "linear_regression__linear_regression_ddp@2"


@pytest.mark.parametrize("row", RECORDED)
def test_each_recorded_run_gets_the_catalogue_s_verdict(row):
    path = fixture_path(row)
    assert path.is_file(), f"no fixture for {row.id}: run `python -m tools.record_fixtures`"
    found = verdicts(load(path))
    assert statuses(found, "failed") == set(row.failed)
    assert statuses(found, "skipped") == row.skipped
    for check_id, says in row.failed.items():
        assert says.message in found[check_id].message and says.hint in found[check_id].hint


def test_every_recorded_event_fits_the_schema():
    for path in sorted(FIXTURES.glob("*.json.gz")):
        for rank in load(path)["ranks"]:
            for event in rank["events"]:
                facts = {k: v for k, v in event.items() if k not in events.COMMON_FIELDS}
                try:
                    events.validate(event["kind"], facts)
                except events.UnknownEvent as error:
                    pytest.fail(f"{path.name}: {error}; the probes changed: run `python -m tools.record_fixtures`")


def _cut(data: dict, rank: int, keep: int, status: RankStatus) -> dict:
    data["ranks"][rank]["events"] = data["ranks"][rank]["events"][:keep]
    outcome = data["launch"]["ranks"][rank]
    outcome["status"], outcome["exit_code"] = status, None if status == RankStatus.HUNG else -9
    return data


def test_a_rank_hung_halfway_fails_closed(fixture):
    found = verdicts(_cut(fixture(REFERENCE), 1, 40, RankStatus.HUNG))
    assert statuses(found, "skipped") == set()  # "does not apply" is only known of a run that finished
    for check_id in ("weights_in_sync", "training", "rank0_logs", "cleanup", "gpu_device"):
        assert found[check_id].status == "failed", check_id
    assert "rank 1 was still running at the deadline" in found["weights_in_sync"].message
    # Their evidence was complete: every rank's group was ready, and rank 0's own checkpoint loads.
    assert found["process_group"].status == found["checkpoint_loadable"].status == "passed"


def test_a_run_with_no_records_fails_every_check(fixture):
    data = fixture(REFERENCE)
    for rank in data["ranks"]:
        rank["events"] = []
    found = verdicts(data)
    assert statuses(found, "failed") == set(found)
    assert "never called init_process_group" in found["process_group"].message


def test_a_rank_done_without_the_end_of_run_records_is_called_incomplete(fixture):
    """A forged rank_done (then os._exit) must not stand for a finished run."""
    data = fixture(REFERENCE)
    events_of_1 = data["ranks"][1]["events"]
    data["ranks"][1]["events"] = [e for e in events_of_1 if e["kind"] not in ("training_end", "rank_end")]
    found = verdicts(data)
    assert found["weights_in_sync"].status == "failed"
    assert "the run's records are incomplete" in found["weights_in_sync"].message
    assert found["cleanup"].status == "failed" and found["training"].status == "failed"


def test_random_truncations_never_crash_the_judge():
    rng = random.Random(0)
    for path in sorted(FIXTURES.glob("*.json.gz")):
        data = load(path)
        for _ in range(5):
            cut = copy.deepcopy(data)
            for rank in cut["ranks"]:
                stream = rank["events"]
                rank["events"] = stream[: rng.randrange(len(stream) + 1)] + stream[-1:] * rng.randrange(2)
            found = verdicts(cut)  # must not raise
            assert len(found) == len(EXERCISES[data["exercise"]].checks)


def _epochs(data: dict, rank: int) -> list[dict]:
    return [e for e in data["ranks"][rank]["events"] if e["kind"] == "sampler_epoch"]


def test_ranks_reading_the_same_samples_beyond_the_padding_fail_the_partition(fixture):
    data = fixture(REFERENCE)
    _epochs(data, 1)[0]["indices"] = list(_epochs(data, 0)[0]["indices"])
    found = verdicts(data)["distributed_sampler"]
    assert found.status == "failed"
    assert "In epoch 1, ranks 0 and 1 read 500 of the same samples" in found.message


def test_padding_of_an_uneven_split_is_not_an_overlap(fixture):
    data = fixture("linear_regression__linear_regression_ddp@3")  # 1000 samples, 334 per rank: 2 repeated
    assert verdicts(data)["distributed_sampler"].status == "passed"
    _epochs(data, 2)[0]["indices"][0] = _epochs(data, 0)[0]["indices"][5]  # one more shared sample than padding
    assert "read 3 of the same samples" in verdicts(data)["distributed_sampler"].message


def test_samples_no_rank_read_are_named(fixture):
    data = fixture(REFERENCE)
    del _epochs(data, 1)[3]["indices"][:10]
    found = verdicts(data)["distributed_sampler"]
    assert found.status == "failed" and "In epoch 4, no rank read 10 of the 1000 samples" in found.message


def test_one_step_out_of_sync_is_caught_at_that_step(fixture):
    data = fixture(REFERENCE)
    snapshot = next(e for e in data["ranks"][1]["events"] if e["kind"] == "snapshot" and e["step"] == 5)
    snapshot["fingerprint"] = [x * 1.01 for x in snapshot["fingerprint"]]
    found = verdicts(data)["weights_in_sync"]
    assert found.status == "failed" and found.message.startswith("After step 5 the ranks' weights differ")


def test_a_repeated_shuffle_fails_set_epoch(fixture):
    data = fixture(REFERENCE)
    for rank in (0, 1):
        for epoch in _epochs(data, rank):
            epoch["epoch"] = 0
    found = verdicts(data)["set_epoch"]
    assert found.status == "failed" and "set_epoch was never called" in found.message


def test_a_checkpoint_written_as_a_plain_file_by_another_rank_counts(fixture):
    data = fixture(REFERENCE)
    data["ranks"][1]["events"].insert(-1, {"kind": "file_written", "time": 0.0, "step": 3, "path": "/w/rank1.ckpt"})
    found = verdicts(data)["rank0_checkpoint"]
    assert found.status == "failed" and "Rank 1 also saved a checkpoint (rank1.ckpt)" in found.message


def test_on_gpus_the_backend_and_the_device_are_judged(fixture):
    data = fixture(REFERENCE)
    data["backend"] = "nccl"
    found = verdicts(data)
    assert "created its process group with the gloo backend, but this run uses nccl" in found["process_group"].message
    assert "created its process group before choosing its GPU" in found["gpu_device"].message


def test_a_probe_that_failed_is_shown_as_a_grader_problem(fixture):
    data = fixture(REFERENCE)
    failure = {"kind": "probe_error", "time": 0.0, "step": 0, "where": "install.<locals>.save", "error": "OSError: x"}
    data["ranks"][1]["events"].insert(0, failure)
    solution = Path(EXERCISES["linear_regression"].solution)
    report = judge(Submission(solution, False, ""), RunRecords.from_dict(data))
    assert report.probe_errors == [
        "rank 1: the grader could not observe install.<locals>.save (OSError: x); tell your instructor."
    ]

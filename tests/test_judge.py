"""The checks on recorded runs: no ranks start, so each test takes
milliseconds. The fixtures are real runs of the catalogue's submissions
(tests/fixtures/runs/, written by `python -m tools.record_fixtures`); the edge
cases below edit them into what real ranks reach only slowly or by chance."""

from __future__ import annotations

import copy
import functools
import importlib.util
import random
from pathlib import Path

import pytest
import test_checks
from test_checks import TABLE

from autograder.exercises import EXERCISES
from autograder.grading import judge
from autograder.judge.checks import all_checks, run_checks
from autograder.judge.records import RunRecords
from autograder.schema import events
from autograder.schema.run import RankStatus
from autograder.submission import Submission
from tools import record_fixtures
from tools.record_fixtures import FIXTURES, RERECORD, fixture_name, fixture_path, load, why_stale

RECORDED = [pytest.param(row, id=row.id) for row in TABLE]
REFERENCE = "linear_regression__linear_regression_ddp@2"
# The checks that need every rank to have finished: on a run that stopped early they fail as not reached.
NEED_THE_WHOLE_RUN = {"rank0_logs", "cleanup", "launcher"}
CPU_RUN = {"gpu_device"}  # cannot apply: 0 of 0 points, whatever happened


@functools.cache
def _loaded(name: str) -> dict:
    return load(FIXTURES / f"{name}.json.gz")


def fixture(name: str = REFERENCE) -> dict:
    """A fixture's records, to edit at will."""
    return copy.deepcopy(_loaded(name))


def verdicts(data: dict) -> dict:
    run = RunRecords.from_dict(data)
    return {v.id: v for v in run_checks(run, EXERCISES[run.exercise].checks)}


def statuses(found: dict, status: str) -> set[str]:
    return {check_id for check_id, v in found.items() if v.status == status}


def rank_events(data: dict, rank: int, kind: str) -> list[dict]:
    return [e for e in data["ranks"][rank]["events"] if e["kind"] == kind]


def stop(data: dict, rank: int, keep: int, status: RankStatus, exit_code: int | None) -> dict:
    """Rank `rank`'s records end after its first `keep` events, and the launcher saw `status`."""
    data["ranks"][rank]["events"] = data["ranks"][rank]["events"][:keep]
    outcome = data["launch"]["ranks"][rank]
    outcome["status"], outcome["exit_code"] = status, exit_code
    if status == RankStatus.HUNG:
        data["launch"]["hung"] = [rank]
    else:
        data["launch"]["first_failure"] = rank
    return data


# --- the catalogue, judged from its recordings ---------------------------------


@pytest.mark.parametrize("row", RECORDED)
def test_each_recorded_run_gets_everything_the_catalogue_says_of_it(row):
    """test_checks.py's assertions, on the report judged from the row's recording."""
    path = fixture_path(row)
    assert path.is_file(), f"no fixture for {row.id}: {RERECORD} {fixture_name(row)}`"
    reference = test_checks.REFERENCES[row.exercise]
    program = reference if row.submission == "reference" else Path(f"{row.submission}.py")
    submission = Submission(program, False, record_fixtures.source(row))
    test_checks.assert_everything_the_row_says(row, judge(submission, RunRecords.from_dict(fixture(fixture_name(row)))))


def test_every_recorded_event_fits_the_schema():
    for path in sorted(FIXTURES.glob("*.json.gz")):
        for rank in _loaded(path.name.removesuffix(".json.gz"))["ranks"]:
            for event in rank["events"]:
                facts = {k: v for k, v in event.items() if k not in events.COMMON_FIELDS}
                try:
                    events.validate(event["kind"], facts)
                except events.UnknownEvent as error:
                    pytest.fail(f"{path.name}, rank {rank['rank']}: {error}; the schema changed: {RERECORD}`")
                # A probe writes every field in its declared shape, or the judge would read a default.
                assert not events.is_malformed(event), (path.name, rank["rank"], event["kind"])
            assert not rank.get("malformed") or "forged" in path.name, path.name


def test_every_fixture_was_recorded_from_its_submission_and_by_the_probes_as_they_are_now():
    stale = {
        fixture_name(row): why
        for row in TABLE
        if fixture_path(row).is_file() and (why := why_stale(row, _loaded(fixture_name(row))))
    }
    names = "" if len(stale) == len(TABLE) else " " + " ".join(stale)  # all of them: the command alone
    assert not stale, f"stale fixtures, {RERECORD}{names}`: {sorted(set(stale.values()))}"


def test_a_change_to_a_probe_or_the_event_schema_makes_every_fixture_stale(tmp_path, monkeypatch):
    row = next(row for row in TABLE if fixture_name(row) == REFERENCE)
    saved = {"recorded_from": record_fixtures.recorded_from(row)}  # as if recorded just now
    assert why_stale(row, saved) is None
    probes = tmp_path / "probes"
    probes.mkdir()
    for path in record_fixtures.PRODUCERS[0].glob("*.py"):
        (probes / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(record_fixtures, "PRODUCERS", (probes, record_fixtures.PRODUCERS[1]))
    assert why_stale(row, saved) is None, "the same probes, elsewhere, are not a change"
    with (probes / "sampler.py").open("a") as probe:
        probe.write("# an edit\n")
    assert "other probes" in why_stale(row, saved)


def test_every_fixture_is_a_row_of_the_catalogue():
    rows = {fixture_path(row).name for row in TABLE}
    orphans = sorted(p.name for p in FIXTURES.glob("*.json.gz") if p.name not in rows)
    assert not orphans, f"fixtures of no row of tests/test_checks.py's TABLE (delete them): {orphans}"


# --- runs that stopped early fail closed ------------------------------------------


def test_a_rank_hung_halfway_fails_closed():
    data = stop(fixture(), 1, 40, RankStatus.HUNG, None)
    reached = len(rank_events(data, 1, "model_fed"))
    assert 0 < reached < 20
    found = verdicts(data)
    assert statuses(found, "skipped") == CPU_RUN  # "does not apply" is only known of a run that finished
    assert found["gpu_device"].max_points == 0
    assert statuses(found, "failed") == NEED_THE_WHOLE_RUN | {"rank0_checkpoint"}
    for check_id in NEED_THE_WHOLE_RUN | {"rank0_checkpoint"}:
        assert "rank 1 was still running at the deadline" in found[check_id].message, check_id
        assert not found[check_id].reached and found[check_id].rank == 1
    # What passes has its evidence: rank 1 joined the group, wrapped and stepped its model; rank 0's checkpoint
    # loads; the partition is judged on the epochs both ranks reached, not all 20, and the weights at the
    # steps both recorded.
    assert found["distributed_sampler"].status == "passed"
    assert f"in each of {reached} epoch(s)" in found["distributed_sampler"].message
    assert "recorded before the run stopped" in found["weights_in_sync"].message


def test_a_rank_that_failed_halfway_is_named_as_the_cause():
    data = fixture()
    end_of_run = rank_events(data, 1, "rank_end") + rank_events(data, 1, "ddp_forward_calls")
    end_of_run += [e | {"fingerprint": None, "steps": 0} for e in rank_events(data, 1, "training_end")]
    stop(data, 1, 30, RankStatus.FAILED, 1)
    error = {"kind": "error", "time": 0.0, "step": 9, "type": "RuntimeError", "from_grader": False}
    error |= {"message": "boom", "hint": "", "frames": []}
    data["ranks"][1]["events"] += [error, *end_of_run, {"kind": "rank_done", "time": 0.0, "step": 9, "failed": True}]
    found = verdicts(data)
    assert statuses(found, "skipped") == CPU_RUN
    assert NEED_THE_WHOLE_RUN <= statuses(found, "failed")
    assert "rank 1 stopped with an error first" in found["cleanup"].message
    solution = Path(EXERCISES["linear_regression"].solution)
    report = judge(Submission(solution, False, ""), RunRecords.from_dict(data))
    assert report.error == "Rank 1 failed: RuntimeError: boom" and not report.passed


def test_a_rank_that_raised_is_the_cause_even_when_its_cut_off_peer_exits_first():
    """Rank 0 raised; rank 1, its connection gone, exited before rank 0 did, so the
    launcher saw rank 1 fail first and stopped rank 0. The cause is still rank 0's error."""
    data = fixture()
    stop(data, 0, 30, RankStatus.STOPPED, -9)
    stop(data, 1, 31, RankStatus.FAILED, 1)
    data["launch"]["evidence"]["written_by"] = {}  # rank 0 raised before it saved
    cause = {"kind": "error", "time": 1.0, "step": 9, "type": "AttributeError", "from_grader": False}
    cause |= {"message": "'function' object has no attribute 'state_dict'", "hint": "", "frames": []}
    cut_off = cause | {"time": 1.2, "type": "RuntimeError", "message": "[pair.cc:545] Connection closed by peer"}
    data["ranks"][0]["events"].append(cause)
    data["ranks"][1]["events"].append(cut_off)
    run = RunRecords.from_dict(data)
    assert run.launch.first_failure == 1 and run.root_cause_rank == 0
    report = judge(Submission(Path(EXERCISES["linear_regression"].solution), False, ""), run)
    assert report.error.startswith("Rank 0 failed: AttributeError: 'function' object"), report.error
    assert "rank 0 stopped with an error first" in report.check("cleanup").message


def test_a_rank_killed_without_a_word_fails_closed():
    """os._exit, a segfault or the OOM killer: no error event, no end-of-run records."""
    data = stop(fixture(), 1, 60, RankStatus.FAILED, -11)
    found = verdicts(data)
    assert statuses(found, "skipped") == CPU_RUN
    assert statuses(found, "failed") == NEED_THE_WHOLE_RUN | {"rank0_checkpoint"}
    assert found["cleanup"].message.startswith("Could not confirm that the process group was destroyed: rank 1 ")
    reached = len(rank_events(data, 1, "model_fed"))  # the epochs rank 1 finished
    assert f"in each of {reached} epoch(s)" in found["distributed_sampler"].message


def test_a_rank_killed_without_a_word_is_not_said_to_have_finished():
    found = verdicts(stop(fixture(), 1, 60, RankStatus.FAILED, -11))
    assert "finished" not in found["cleanup"].message, found["cleanup"].message
    assert "rank 1 was killed by signal 11 before main returned" in found["cleanup"].message


def test_a_rank_done_without_the_end_of_run_records_is_called_incomplete():
    """A forged rank_done (then os._exit) must not stand for a finished run."""
    data = fixture()
    stream = data["ranks"][1]["events"]
    data["ranks"][1]["events"] = [e for e in stream if e["kind"] not in ("training_end", "rank_end")]
    found = verdicts(data)
    assert NEED_THE_WHOLE_RUN <= statuses(found, "failed")
    assert "the run's records are incomplete (rank 1 ended" in found["cleanup"].message


def test_a_run_whose_ranks_recorded_nothing_fails_every_check():
    data = fixture()
    for rank in data["ranks"]:
        rank["events"] = []
    data["launch"]["evidence"] |= {"written_by": {}, "loopback_packets": None}  # else: tampering (below)
    found = verdicts(data)
    assert statuses(found, "failed") == set(found) - CPU_RUN
    assert found["process_group"].message.startswith("Could not confirm that every rank created the process group")
    assert found["rank0_checkpoint"].message.startswith("Could not confirm who saved checkpoints")


# --- the evaluation: what a shortcut would look like in the records ---------------

MNIST_REFERENCE = "mnist__mnist_ddp@2"


def test_an_accuracy_returned_without_measuring_it_fails_against_the_graders_own():
    """A made-up accuracy, the same on every rank, is told apart by the grader's own measurement."""
    data = fixture(MNIST_REFERENCE)
    truth = rank_events(data, 0, "grader_evaluation")[0]["accuracy"]
    for rank in (0, 1):
        rank_events(data, rank, "main_returned")[0]["value"] = 0.99
    verdict = verdicts(data)["distributed_eval"]
    assert verdict.status == "failed"
    assert f"main returned an accuracy of 99.00%, but the trained model gets {truth:.2%}" in verdict.message


def test_test_shares_that_do_not_split_the_test_set_fail():
    """Both ranks taking rank 0's share: a sampler over the test set, but not one made for this rank."""
    data = fixture(MNIST_REFERENCE)

    def test_share(rank: int) -> dict:
        test_samplers = {e["sampler"] for e in rank_events(data, rank, "sampler") if e["dataset"]["length"] == 500}
        return [e for e in rank_events(data, rank, "model_fed") if e["sampler"] in test_samplers][-1]

    test_share(1)["evaluated"] = list(test_share(0)["evaluated"])
    verdict = verdicts(data)["distributed_eval"]
    assert verdict.status == "failed" and "do not split it" in verdict.message


def assert_tampering(data: dict, says: str) -> None:
    found = verdicts(data)
    assert statuses(found, "failed") == set(found) - CPU_RUN
    for verdict in found.values():
        assert verdict.status == "skipped" or verdict.message.startswith("Not checked: tampering detected"), verdict
    assert says in found["process_group"].message, found["process_group"].message


def test_the_reference_run_has_evidence_and_no_contradiction():
    evidence = fixture()["launch"]["evidence"]
    assert evidence["sandboxed"] and evidence["written_by"] == {"linear_regression.pt": [0]}
    assert evidence["loopback_packets"] > 640  # gloo's traffic: more than a packet a step
    assert not statuses(verdicts(fixture()), "failed") - {"launcher"} - CPU_RUN


def test_a_save_the_kernel_saw_and_the_records_do_not_show_is_tampering():
    data = fixture()
    data["ranks"][0]["events"] = [e for e in data["ranks"][0]["events"] if e["kind"] != "torch_save"]
    assert_tampering(data, "rank 0 wrote linear_regression.pt, but its records show no such write")


def test_records_of_averaging_without_traffic_between_the_ranks_are_tampering():
    data = fixture()
    data["launch"]["evidence"]["loopback_packets"] = 3
    assert_tampering(data, "averaged gradients in 320 steps, but 3 packets passed between them")


def test_a_rank_that_joined_in_its_records_only_is_tampering():
    data = fixture()
    data["launch"]["evidence"]["joined"] = [0]  # the kernel saw only rank 0 write to the rendezvous
    assert_tampering(data, "rank 1's records say it joined the process group, but it never wrote to the rendezvous")


def test_a_record_stream_the_channel_kept_out_is_tampering():
    data = fixture()
    data["launch"]["intrusions"] = ["a second record stream claimed to be rank 1 (process 99)"]
    assert_tampering(data, "a second record stream claimed to be rank 1 (process 99) (on the records channel)")


def test_an_unsandboxed_run_has_no_evidence_to_contradict():
    data = fixture()
    data["launch"]["evidence"] = {"sandboxed": False}
    data["ranks"][0]["events"] = [e for e in data["ranks"][0]["events"] if e["kind"] != "torch_save"]
    assert "tampering" not in verdicts(data)["rank0_checkpoint"].message


@pytest.mark.parametrize("kept", [0, 1], ids=["no ranks", "rank 0 only"])
def test_a_run_with_records_of_fewer_ranks_than_its_world_size_fails_closed(kept):
    data = fixture()
    data["ranks"] = data["ranks"][:kept]
    found = verdicts(data)  # with no ranks at all: IndexError in distributed_sampler
    assert found["process_group"].status == "failed"  # not "All 2 ranks joined one gloo process group"
    assert found["weights_in_sync"].status == "failed"


def test_a_submission_that_could_not_run_fails_every_check_with_its_problem():
    data = fixture("linear_regression__nccl_on_cpu@2")
    data |= {"ranks": [], "launch": None, "problem": {"message": "SyntaxError: x", "hint": "Fix line 3."}}
    found = verdicts(data)
    assert statuses(found, "failed") == set(found) - CPU_RUN
    failed = {(v.message, v.hint, v.reached) for v in found.values() if v.status == "failed"}
    assert failed == {("Not checked: the code could not run.", "Fix line 3.", False)}


def _cut(rng: random.Random, stream: list) -> list:
    """A record stream that ends early, maybe with its last event sent twice."""
    return stream[: rng.randrange(len(stream) + 1)] + stream[-1:] * rng.randrange(2)


def _cut_attempts(rng: random.Random, launch: dict) -> dict:
    """A torchrun job's launch with each worker's stream of each attempt cut, its other jobs too."""
    attempts = [[_cut(rng, stream) for stream in attempt] for attempt in launch["attempts"]]
    jobs = {name: _cut_attempts(rng, job) for name, job in launch["jobs"].items()}
    return launch | {"attempts": attempts, "jobs": jobs}


def test_random_truncations_never_crash_the_judge_and_fail_closed():
    rng = random.Random(0)
    for path in sorted(FIXTURES.glob("*.json.gz")):
        data = _loaded(path.name.removesuffix(".json.gz"))
        checks = EXERCISES[data["exercise"]].checks
        for _ in range(5):
            cut = data | {"ranks": [rank | {"events": _cut(rng, rank["events"])} for rank in data["ranks"]]}
            if data["launch"] and data["launch"]["attempts"]:  # the checks of a torchrun program read every attempt
                cut["launch"] = _cut_attempts(rng, data["launch"])
            lost_rank_done = any(all(e["kind"] != "rank_done" for e in r["events"]) for r in cut["ranks"])
            found = verdicts(cut)  # must not raise; the judge edits nothing, so the events can be shared
            assert len(found) == len(checks)
            if lost_rank_done:
                assert statuses(found, "skipped") == CPU_RUN & set(checks), path.name
                assert NEED_THE_WHOLE_RUN & set(checks) <= statuses(found, "failed"), path.name


# --- the schema's defaults ---------------------------------------------------------


def test_a_half_written_event_gets_the_schema_s_defaults():
    assert events.parse({"kind": "sampler_epoch", "indices": [3], "undeclared": 1, "time": 2.5}) == {
        "kind": "sampler_epoch",
        "time": 2.5,
        "step": 0,
        "sampler": -1,
        "epoch": 0,
        "indices": [3],
        "finished": False,
    }
    assert events.parse({"kind": "no_such_event"}) is None and events.parse("rank_done") is None
    # A rank_done cut short reads as failed (the default), so the run did not finish.
    data = fixture()
    done = rank_events(data, 1, "rank_done")[0]
    del done["failed"]
    assert RunRecords.from_dict(data).ranks[1].first("rank_done") | {"time": 0} == {
        "kind": "rank_done",
        "time": 0,
        "step": done["step"],
        "failed": True,
    }
    found = verdicts(data)
    assert NEED_THE_WHOLE_RUN <= statuses(found, "failed")


def test_parsed_events_do_not_share_their_defaults():
    first = events.parse({"kind": "ddp_forward_calls"})
    first["calls"]["forward"] = 3
    assert events.parse({"kind": "ddp_forward_calls"})["calls"] == {}
    assert events.EVENTS["ddp_forward_calls"]["calls"].default == {}


@pytest.mark.parametrize(
    "raw, field, default",
    [
        ({"kind": "training_end", "steps": "many"}, "steps", 0),
        ({"kind": "training_end", "steps": True}, "steps", 0),  # a bool is not a count
        ({"kind": "training_end", "fingerprint": {"a": 1}}, "fingerprint", None),
        ({"kind": "training_end", "losses": [[1]]}, "losses", []),
        ({"kind": "snapshot", "fingerprint": [1.0, float("nan")]}, "fingerprint", []),
        ({"kind": "sampler", "dataset": {"length": 3}}, "dataset", None),
        ({"kind": "model_fed", "indices": [1, "2"]}, "indices", []),
        ({"kind": "rank_done", "failed": 0}, "failed", True),
        ({"kind": "error", "frames": [{"file": "x.py"}]}, "frames", []),
    ],
    ids=[
        "text count",
        "bool count",
        "dict fingerprint",
        "short pair",
        "nan",
        "part of a record",
        "text index",
        "int flag",
        "part of a frame",
    ],
)
def test_a_field_of_the_wrong_shape_reads_as_its_default_and_marks_the_event(raw, field, default):
    assert events.parse(raw)[field] == default
    assert events.is_malformed(raw)
    assert not events.is_malformed(events.parse(raw))


def test_a_tampered_record_stream_is_trusted_for_nothing():
    data = fixture()
    rank_events(data, 1, "training_end")[0]["steps"] = "all of them"
    found = verdicts(data)
    assert statuses(found, "failed") == set(found) - CPU_RUN
    assert all(not v.reached for v in found.values() if v.status == "failed")
    assert "rank 1's hold 1 event(s) that the grader did not write" in found["training"].message
    solution = Path(EXERCISES["linear_regression"].solution)
    report = judge(Submission(solution, False, ""), RunRecords.from_dict(data))
    assert "did not write, so nothing this run recorded can be trusted" in report.error


MUTATIONS = (
    lambda rng, value: None,
    lambda rng, value: "x",
    lambda rng, value: -(10**12),
    lambda rng, value: [],
    lambda rng, value: {},
    lambda rng, value: [value, value] if not isinstance(value, list) else value[: rng.randrange(len(value) + 1)],
    lambda rng, value: {"kind": value} if not isinstance(value, dict) else dict(list(value.items())[:1]),
    lambda rng, value: float("inf"),
)


def _mutated(rng: random.Random, data: dict) -> dict:
    """A copy of a run's records with a few events cut, repeated, and fields changed to anything."""
    data = copy.deepcopy(data)
    own = [{"events": data["own_launcher"]["events"]}] if data.get("own_launcher") else []
    for rank in data["ranks"] + own + [{"events": e} for e in data.get("own_launcher_ranks", [])]:
        stream = rank["events"]
        for _ in range(rng.randrange(4)):
            if not stream:
                break
            event = rng.choice(stream)
            name = rng.choice([k for k in event if k != "kind"] or ["kind"])
            event[name] = rng.choice(MUTATIONS)(rng, event[name])
        if stream and rng.random() < 0.3:
            stream.insert(rng.randrange(len(stream)), copy.deepcopy(rng.choice(stream)))
        if stream and rng.random() < 0.3:
            del stream[rng.randrange(len(stream)) :]
    return data


def test_mutated_records_never_crash_a_check():
    """Each check itself, not run_checks (whose net would hide a crash)."""
    rng = random.Random(10)
    names = sorted(p.name.removesuffix(".json.gz") for p in FIXTURES.glob("*.json.gz"))
    for attempt in range(400):
        name = names[attempt % len(names)]
        run = RunRecords.from_dict(_mutated(rng, _loaded(name)))
        for check in all_checks():
            try:
                outcome = check.judge(run)
            except Exception as error:  # noqa: BLE001 - the point of the test
                pytest.fail(f"{check.id} raised {type(error).__name__}: {error} on a mutation of {name}")
            assert outcome.status in ("passed", "failed", "skipped")


# --- the data partition --------------------------------------------------------------


def feed(data: dict, rank: int, epoch: int, indices: list[int]) -> None:
    """Rank `rank`'s sampler hands out `indices` in its pass `epoch`, and its model is fed them."""
    rank_events(data, rank, "sampler_epoch")[epoch]["indices"] = list(indices)
    rank_events(data, rank, "model_fed")[epoch]["indices"] = list(indices)


def test_ranks_reading_the_same_samples_fail_the_partition_with_the_ranks_named():
    data = fixture()
    feed(data, 1, 0, rank_events(data, 0, "model_fed")[0]["indices"])
    found = verdicts(data)["distributed_sampler"]
    assert found.status == "failed"
    assert "In epoch 1, ranks 0 and 1 read 500 of the same samples" in found.message
    assert "num_replicas=world_size and rank=rank" in found.hint


def test_samples_fed_that_the_sampler_never_handed_out_are_named():
    data = fixture()
    fed = rank_events(data, 1, "model_fed")[2]["indices"]
    outsider = rank_events(data, 0, "model_fed")[2]["indices"][0]
    fed[0] = outsider
    found = verdicts(data)["distributed_sampler"]
    assert found.status == "failed" and found.rank == 1
    assert "In epoch 3, rank 1's model was fed 1 samples that its DistributedSampler did not hand out" in (
        found.message
    )
    assert f"index {outsider} was not one of them" in found.message


@pytest.mark.parametrize(
    "counts, message",
    [
        ({"plain_rows": 20000}, "samples from a DataLoader without the DistributedSampler (20000) than from"),
    ],
)
def test_more_samples_from_a_plain_loader_than_from_the_sampler_fail(counts, message):
    data = fixture()
    rank_events(data, 0, "model_inputs")[0].update(counts)
    found = verdicts(data)["distributed_sampler"]
    assert found.status == "failed" and message in found.message


def test_padding_of_an_uneven_split_is_not_an_overlap():
    data = fixture("linear_regression__linear_regression_ddp@3")  # 1000 samples, 334 per rank: 2 repeated
    epochs = [rank_events(data, rank, "model_fed") for rank in range(3)]
    assert sum(len(e[0]["indices"]) for e in epochs) == 1002
    assert verdicts(data)["distributed_sampler"].status == "passed"
    # The padding repeats the first two samples: rank 0's first on rank 1, rank 1's first on rank 2.
    assert epochs[1][0]["indices"][-1] == epochs[0][0]["indices"][0]
    assert epochs[2][0]["indices"][-1] == epochs[1][0]["indices"][0]
    shared = epochs[0][0]["indices"][5]
    epochs[2][0]["indices"][0] = shared  # one shared sample more than the padding
    rank_events(data, 2, "sampler_epoch")[0]["indices"][0] = shared
    found = verdicts(data)["distributed_sampler"]
    assert found.status == "failed"
    assert "In epoch 1, ranks 0, 1 and 2 read 3 of the same samples" in found.message
    assert str(shared) in found.message.split("for example indices ")[1]


def test_samples_no_rank_read_are_named():
    data = fixture()
    del rank_events(data, 1, "model_fed")[3]["indices"][:10]
    found = verdicts(data)["distributed_sampler"]
    assert found.status == "failed" and "In epoch 4, no rank read 10 of the 1000 samples" in found.message


def test_a_repeated_shuffle_fails_set_epoch():
    data = fixture()
    for rank in (0, 1):
        for epoch in rank_events(data, rank, "sampler_epoch") + rank_events(data, rank, "model_fed"):
            epoch["epoch"] = 0
    found = verdicts(data)["set_epoch"]
    assert found.status == "failed" and "in every one of the 20 epochs (set_epoch was never called)" in found.message


# --- the model and what rank 0 writes --------------------------------------------------


def test_one_step_out_of_sync_is_caught_at_that_step():
    data = fixture()
    snapshot = next(e for e in rank_events(data, 1, "snapshot") if e["step"] == 5)
    snapshot["fingerprint"] = [x * 1.01 for x in snapshot["fingerprint"]]
    found = verdicts(data)["weights_in_sync"]
    assert found.status == "failed" and found.message.startswith("After step 5 the ranks' weights differ")


def test_a_checkpoint_written_as_a_plain_file_by_another_rank_counts():
    data = fixture()
    data["ranks"][1]["events"].insert(-1, {"kind": "file_written", "time": 0.0, "step": 3, "path": "/w/rank1.ckpt"})
    found = verdicts(data)
    assert found["rank0_checkpoint"].status == "failed"
    assert "Rank 1 also saved a checkpoint (rank1.ckpt)" in found["rank0_checkpoint"].message
    assert found["rank0_logs"].status == "passed"  # a checkpoint is not a log


@pytest.mark.parametrize(
    "problem, says",
    [
        ("unreadable", "torch.load cannot open it (UnpicklingError: x)"),
        ("no_state_dict", "torch.load opens it, but it holds no model state dict"),
        ("missing", "it is not on disk at the end of the run"),
    ],
)
def test_a_checkpoint_is_what_the_grader_finds_in_the_file(problem, says):
    data = fixture()
    [path] = data["checkpoints"]
    data["checkpoints"][path] = {"problem": problem, "error": "UnpicklingError: x" if problem == "unreadable" else ""}
    found = verdicts(data)
    for check_id in ("rank0_checkpoint", "checkpoint_loadable"):
        assert found[check_id].status == "failed", check_id
        assert f"Rank 0 wrote linear_regression.pt, but it is not a checkpoint: {says}" in found[check_id].message


def _sampled(data: dict, step: int = 0) -> list[dict]:
    """Each rank's gradients of a sampled step (counted from 0), to edit."""
    return [next(e for e in rank_events(data, rank, "step_gradients") if e["step"] == step) for rank in (0, 1)]


def _applied(data: dict, gradients: list[list[float]], step: int = 0) -> dict:
    for sampled, gradient in zip(_sampled(data, step), gradients, strict=True):
        sampled["applied_gradient"] = gradient
    return data


def _own(step: int = 0) -> list[list[float]]:
    return [sampled["own_gradient"] for sampled in _sampled(fixture(), step)]


def _mean(gradients: list[list[float]]) -> list[float]:
    return [sum(values) / len(gradients) for values in zip(*gradients, strict=True)]


def test_the_applied_gradient_must_be_the_ranks_mean():
    own = _own()
    each_its_own = verdicts(_applied(fixture(), own))["weights_in_sync"]
    assert "Each rank applied its own gradient" in each_its_own.message
    from_rank_1 = verdicts(_applied(fixture(), [own[1], own[1]]))["weights_in_sync"]
    assert "Every rank applied rank 1's gradient instead of the mean" in from_rank_1.message
    clipped = verdicts(_applied(fixture(), [[x / 3 for x in _mean(own)]] * 2))["weights_in_sync"]
    assert clipped.status == "passed"  # clipping shortens the mean; it does not turn it


def test_every_sampled_step_is_judged_not_the_first_alone():
    steps = {e["step"] for e in rank_events(fixture(), 0, "step_gradients")}
    assert len(steps) > 20
    later = max(steps)
    own = _own(later)
    found = verdicts(_applied(fixture(), [own[0], [2 * x for x in _mean(own)]], later))["weights_in_sync"]
    assert found.status == "failed"
    assert f"The gradient rank 0 applied in step {later + 1} is not the mean" in found.message


def _loss_scales(data: dict, scale: float) -> dict:
    for e in (e for rank in (0, 1) for e in rank_events(data, rank, "step_gradients")):
        e["loss_scales"] = [scale]
    return data


def test_a_loss_divided_by_the_world_size_and_summed_is_the_mean():
    """Each rank's own gradient is of its loss / 2: their sum, applied, is the mean of the unscaled ones."""
    data = _loss_scales(fixture(), 0.5)
    for e in (e for rank in (0, 1) for e in rank_events(data, rank, "step_gradients")):
        e["own_gradient"] = [x / 2 for x in e["own_gradient"]]
    assert verdicts(data)["weights_in_sync"].status == "passed"
    summed = verdicts(_loss_scales(data, 1.0))["weights_in_sync"]  # the same gradients of an unscaled loss
    assert "applied the sum of the ranks' gradients, not their mean" in summed.message


def test_a_loss_divided_by_the_world_size_and_averaged_again_is_too_small():
    found = verdicts(_loss_scales(fixture(), 0.5))["weights_in_sync"]
    assert found.status == "failed"
    assert "divided its loss by the world size, and the gradients were averaged as well" in found.message
    assert "so each step was 2 times smaller" in found.message
    accumulated = verdicts(_loss_scales(fixture(), 0.25))["weights_in_sync"]  # loss / 4 over one backward
    assert accumulated.status == "passed"


def test_gradients_left_from_the_step_before_are_not_an_averaging_fault():
    """Without zero_grad, a step applies the mean plus what the step before left."""
    data = fixture()
    before = [sampled["applied_gradient"] for sampled in _sampled(data, 4)]
    mean = _mean(_own(5))
    _applied(data, [[m + b for m, b in zip(mean, left, strict=True)] for left in before], 5)
    assert verdicts(data)["weights_in_sync"].status == "passed"
    _applied(data, [[2 * m + b for m, b in zip(mean, left, strict=True)] for left in before], 5)
    assert verdicts(data)["weights_in_sync"].status == "failed"


def test_on_gpus_the_backend_and_the_device_are_judged():
    data = fixture()
    data["backend"] = "nccl"
    found = verdicts(data)
    assert "created its process group with the gloo backend, but this run uses nccl" in found["process_group"].message
    assert "created its process group before choosing its GPU" in found["gpu_device"].message


def test_on_gpus_a_program_that_ran_and_never_made_a_group_is_judged_not_crashed_on():
    data = fixture("linear_regression__blank_main@2")  # every rank finished, having done nothing
    data["backend"] = "nccl"
    gpu = verdicts(data)["gpu_device"]
    assert gpu.status == "failed" and "Could not confirm GPU placement: rank 0 finished without doing it" in gpu.message


def test_a_probe_that_failed_is_shown_as_a_grader_problem():
    data = fixture()
    failure = {"kind": "probe_error", "time": 0.0, "step": 0, "where": "install.<locals>.save", "error": "OSError: x"}
    data["ranks"][1]["events"].insert(0, failure)
    solution = Path(EXERCISES["linear_regression"].solution)
    report = judge(Submission(solution, False, ""), RunRecords.from_dict(data))
    assert report.probe_errors == [
        "rank 1: the grader could not observe install.<locals>.save (OSError: x); tell your instructor."
    ]


# --- logs: the content, not the count -------------------------------------------------


def _with_lines(data: dict, rank: int, lines: list) -> dict:
    data["launch"]["ranks"][rank]["lines"] = lines
    return data


def test_a_line_rank_1_writes_once_is_not_a_log_but_one_it_repeats_is():
    once = _with_lines(fixture(), 1, [["Done!", 1, "Done!"], ["rank # ready", 1, "rank 1 ready"]])
    assert verdicts(once)["rank0_logs"].status == "passed"
    twice = _with_lines(fixture(), 1, [["step # loss #", 2, "step 3 loss 0.5"], ["Done!", 1, "Done!"]])
    found = verdicts(twice)["rank0_logs"]
    assert found.status == "failed" and found.rank == 1
    assert 'Rank 1 wrote the line "step 3 loss 0.5" 2 times' in found.message
    assert '("step # loss #")' in found.message


def test_rank_0_must_write_a_training_log():
    found = verdicts(_with_lines(fixture(), 0, [["Done!", 1, "Done!"]]))["rank0_logs"]
    assert found.status == "failed" and "Rank 0 wrote no training log" in found.message


def test_the_line_tally_masks_numbers_and_redraws_and_is_bounded():
    from autograder.launch.lines import MAX_TEMPLATES, LineTally, template

    assert template("loss: 0.123  [   32/  128]") == template("loss: 1.5e-3  [  640/  128]") == "loss: # [ #/ #]"
    assert template(" 40%|\u2588\u2588\u2588\u2588      | 4/10 [00:01<00:02]") == template(
        " 50%|\u2588\u2588\u2588\u2588\u2588     | 5/10 [00:02<00:02]"
    )
    tally = LineTally()
    for step in range(3):
        tally.feed(f"\r{step}/3 |{'#' * (step + 1)}")  # a bar redrawn with carriage returns, as tqdm does
    tally.feed("\nDone!\n\n   \n")
    assert tally.summary() == [["#/# |#", 3, "0/3 |#"], ["Done!", 1, "Done!"]]
    flood = LineTally()
    flood.feed("".join(f"line {chr(65 + i % 26)}{chr(65 + i // 26 % 26)}{i // 676}x\n" for i in range(5000)))
    assert len(flood.counts) == MAX_TEMPLATES and flood.lines == 5000


# --- the student's launcher ------------------------------------------------------------


def _launcher_events(data: dict, *new: dict, status: RankStatus = RankStatus.FINISHED) -> dict:
    own = data["own_launcher"]
    own["events"] = [{"time": 0.0, "step": 0, **event} for event in new]
    own["outcome"]["status"] = status
    return data


def test_the_reference_s_launcher_was_run_and_passed():
    data = fixture()
    kinds = [e["kind"] for e in data["own_launcher"]["events"]]
    assert kinds == ["spawn_called", "spawn_joined", "launcher_done"]
    assert verdicts(data)["launcher"].status == "passed"


SPAWNED_2 = {"kind": "spawn_called", "nprocs": 2, "start_method": "spawn", "gpus": 0}
DONE = {"kind": "launcher_done", "failed": False, "error": ""}


@pytest.mark.parametrize(
    "events, status, message, hint",
    [
        ([DONE], RankStatus.FINISHED, "never called mp.spawn or start_processes", "mp.spawn(main"),
        (
            [{"kind": "launcher_done", "failed": True, "error": "NameError: name 'mian' is not defined"}],
            RankStatus.FAILED,
            "failed before it started any rank: NameError",
            "outside main",
        ),
        (
            [SPAWNED_2 | {"nprocs": 0}, {"kind": "spawn_joined", "error": ""}, DONE],
            RankStatus.FINISHED,
            "torch.cuda.device_count() is 0",
            "torch.cuda.device_count() or 2",
        ),
        (
            [SPAWNED_2 | {"nprocs": 64}, {"kind": "spawn_refused", "nprocs": 64}],
            RankStatus.FAILED,
            "nprocs=64",
            "Start 1 to 8 processes",
        ),
        (
            [SPAWNED_2, {"kind": "spawn_joined", "error": "ProcessRaisedException: \n\nTraceback\nKeyError: 'RANK'"}],
            RankStatus.FAILED,
            "Not every rank your launcher started finished: KeyError: 'RANK'",
            "fix the first error",
        ),
        ([SPAWNED_2], RankStatus.HUNG, "did not finish in time", "must end once training has"),
        (
            [SPAWNED_2, {"kind": "spawn_joined", "error": ""}, {"kind": "launcher_done", "failed": True, "error": "x"}],
            RankStatus.FAILED,
            "Your ranks finished, but the program then failed: x",
            "after mp.spawn returns",
        ),
    ],
    ids=["no spawn", "crash first", "device_count", "too many", "a rank failed", "hung", "crash after"],
)
def test_each_way_a_launcher_fails_has_its_own_message(events, status, message, hint):
    found = verdicts(_launcher_events(fixture(), *events, status=status))["launcher"]
    assert found.status == "failed"
    assert message in found.message and hint in found.hint


def test_a_launcher_whose_ranks_joined_no_process_group_fails():
    data = fixture()
    data["own_launcher_ranks"][1] = [e for e in data["own_launcher_ranks"][1] if e["kind"] != "process_group_ready"]
    found = verdicts(data)["launcher"]
    assert found.status == "failed" and "but rank 1 never joined a process group" in found.message


def test_a_launcher_that_was_not_run_never_passes():
    data = fixture()
    data["own_launcher"] = None
    assert verdicts(data)["launcher"].status == "failed"


def test_gpu_placement_counts_on_a_gpu_run_only():
    cpu = verdicts(fixture())["gpu_device"]
    assert (cpu.status, cpu.points, cpu.max_points) == ("skipped", 0, 0)
    data = fixture()
    data["backend"] = "nccl"
    assert verdicts(data)["gpu_device"].max_points == 1


# --- a new check is one decorated function ----------------------------------------

THROWAWAY_FAMILY = """
from autograder.judge.checks.registry import check
from autograder.judge.verdict import failed


@check("throwaway", "A throw-away check", 3, "Change 3")
def throwaway(run):
    'Passes when never: it is here to be thrown away.'
    return failed(f"The throw-away check fails on every one of the {run.world_size} ranks.", "Delete it.", 1)
"""


def test_a_new_check_is_one_decorated_function_and_the_rest_follows(tmp_path, monkeypatch):
    from autograder.judge.checks import registry
    from tools import grade_cells

    monkeypatch.setattr(registry, "REGISTERED", dict(registry.REGISTERED))  # thrown away after the test
    module = tmp_path / "throwaway_family.py"
    module.write_text(THROWAWAY_FAMILY)
    spec = importlib.util.spec_from_file_location("throwaway_family", module)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))

    exercise = EXERCISES["linear_regression"]
    assert exercise.checks[-1] == "throwaway" and "throwaway" not in EXERCISES["fault_tolerance"].checks
    cell = grade_cells.grade_cells(exercise)[-1]
    assert cell.metadata["nbgrader"]["grade_id"] == "lr_throwaway" and cell.metadata["nbgrader"]["points"] == 3
    assert 'require("linear_regression_ddp.py", "linear_regression", "throwaway")' in cell.source
    table = grade_cells.points_table(exercise)
    assert "| `throwaway` | Change 3: A throw-away check | 3 |" in table and "| | **Total** | **21** |" in table
    assert "| `throwaway` | 3 | never: it is here to be thrown away |" in grade_cells.check_tables()[0]
    report = judge(Submission(Path(exercise.solution), False, ""), RunRecords.from_dict(fixture()))
    assert (report.score, report.max_score) == (18, 21)
    verdict = report.check("throwaway")
    assert (verdict.status, verdict.rank, verdict.hint) == ("failed", 1, "Delete it.")
    assert verdict.message == "The throw-away check fails on every one of the 2 ranks."

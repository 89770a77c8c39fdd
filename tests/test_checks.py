"""Every check against the catalogue of submissions in tests/mistakes.py.

Correct submissions pass every check. Each buggy one, the reference with one
classic mistake, fails exactly the checks its mistake breaks, each with a
message that names the mistake and a hint that says what to do. The table is
the test.

Runs use gloo, so the table holds on a machine with GPUs too.

The assertions are written once, as functions of a row and its report, and
applied through two doors: here, to real gradings (the slow tier), and in
tests/test_judge.py, to every row's recorded run judged in milliseconds (the
quick tier). A torchrun grading is three jobs of restarted workers, about 20 s:
only GRADED_TORCHRUN are graded for real here; the others are judged from
their recordings only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import mistakes
import pytest
from conftest import ROOT, failed_ids

from autograder import RunOptions, grade
from autograder.exercises import EXERCISES
from autograder.judge.checks import all_checks

LR, MNIST, FT = "linear_regression", "mnist", "fault_tolerance"
REFERENCES = {name: ROOT / exercise.solution for name, exercise in EXERCISES.items()}

CPU_RUN = frozenset({"gpu_device"})  # cannot apply on a CPU run: 0 of 0 points, even after a crash


@dataclass(frozen=True)
class Says:
    """What a failed check must say: a piece of its message, and of its hint.
    reached=False: it failed only because the run stopped before its evidence."""

    message: str
    hint: str = ""
    reached: bool = True


@dataclass(frozen=True)
class Case:
    submission: str  # "reference", or an entry <exercise>/<submission> of tests/mistakes.py
    exercise: str
    world_size: int
    failed: dict[str, Says]
    skipped: frozenset[str] = CPU_RUN
    problem: Says | None = None  # what the report's headline says, and its hint

    @property
    def id(self) -> str:
        stem = REFERENCES[self.exercise].stem if self.submission == "reference" else self.submission
        return f"{self.exercise}/{stem}@{self.world_size}"


def case(
    exercise: str, submission: str, world_size: int = 2, *, skipped=CPU_RUN, problem=None, **failed: str | Says
) -> Case:
    assert submission == "reference" or f"{exercise}/{submission}" in mistakes.SUBMISSIONS, submission
    says = {check_id: s if isinstance(s, Says) else Says(s) for check_id, s in failed.items()}
    return Case(submission, exercise, world_size, says, frozenset(skipped), problem)


NOT_REACHED = Says("", hint="Fix the error", reached=False)


def stopped_early(*judged: str, **first_failure: str | Says) -> dict[str, str | Says]:
    """A run that stopped early: the checks named in `judged` had their
    evidence before the stop and passed; `first_failure` names the cause; every
    other check fails as not reached (never on a machine where it cannot apply)."""
    not_reached = {c: NOT_REACHED for c in EXERCISES[LR].checks if c not in CPU_RUN and c not in judged}
    return not_reached | first_failure


def torchrun_stopped(*judged: str, **first_failure: str | Says) -> dict[str, str | Says]:
    """A torchrun program whose run without a fault stopped: its other jobs never ran. The checks named in
    `judged` had their evidence before the stop and passed."""
    return {c: NOT_REACHED for c in EXERCISES[FT].checks if c not in judged} | first_failure


def after_the_restart(error: str) -> dict[str, Says]:
    """The faulted run crashed once restarted: each check that needs the resumed run names the error."""
    return {c: Says(error, hint="kill -9") for c in ("resumed", "resume_epoch", "optimizer_restored", "same_result")}


# A crash at the first checkpoint: everything before it was recorded, and is judged: the
# checks of changes 1 to 3, which come first in the report, up to "training".
REPORT_ORDER = [c.id for c in all_checks()]
TRAINED_BEFORE_THE_CRASH = REPORT_ORDER[: REPORT_ORDER.index("training") + 1]
# Without a sampler in training, the checks of its use have nothing to judge, and give no points.
WITHOUT_SAMPLER = {
    "same_dataset": Says("Not checked: comparing the ranks' data sets needs", hint="DistributedSampler first"),
    "set_epoch": Says("Not checked: the shuffle of each epoch needs", hint="DistributedSampler first"),
}
# Without any averaging of the gradients, there is no distributed training to judge.
NOT_DISTRIBUTED = {
    "training": Says("no distributed training to judge", hint="Wrap the model in DDP"),
    "checkpoint_loadable": Says("holds no model of distributed training", hint="Wrap the model in DDP"),
}
NONE_AVERAGED = Says("none of the", hint="Wrap the model in DDP")
HAND_AVERAGED = Says("averaged the gradients itself, with all_reduce: that is correct", hint="drop the hand")
OWN_SHARE = Says("each rank returned the accuracy of its own share", hint="all_reduce")
DEVICE_COUNT_SLIP = Says("asked for 0 processes: torch.cuda.device_count() is 0", hint="torch.cuda.device_count() or 2")

TABLE = [
    # Correct: every check passes.
    case(LR, "reference", 1),
    case(LR, "reference", 2),
    case(LR, "reference", 3),  # 1000 samples do not divide by 3: the sampler pads
    case(LR, "reference", 4),
    case(LR, "seed_per_rank"),
    case(LR, "no_shuffle", skipped=CPU_RUN | {"set_epoch"}),
    case(LR, "sampler_default_args"),
    case(MNIST, "reference", 1),
    case(MNIST, "reference", 2),
    case(MNIST, "reference", 3),
    case(MNIST, "reference", 4),
    # Correct, with the batch changed between the DataLoader and the model, or the gradients accumulated.
    *(
        case(exercise, submission, world_size)
        for exercise, submission in (
            (LR, "normalised_batch"),
            (LR, "noise_augmented"),
            (LR, "cast_and_reshaped"),
            (LR, "workers_out_of_order"),
            (LR, "no_sync_accumulation"),
            (MNIST, "normalised_batch"),
            (MNIST, "normalised_in_forward"),
        )
        for world_size in (2, 3)
    ),
    # (1) process group
    case(LR, "hardcoded_world_size", 3, **stopped_early(process_group="world_size=2, but the grader started 3 ranks")),
    case(
        LR,
        "nccl_on_cpu",
        **stopped_early(
            process_group=Says("asked for the nccl backend", hint="'nccl' if torch.cuda.is_available() else 'gloo'")
        ),
    ),
    case(
        LR,
        "rank_from_environment",
        problem=Says("KeyError: 'RANK'", hint="RANK is set by torchrun, not by mp.spawn"),
        **stopped_early(),
    ),
    # (2) the data
    case(LR, "no_sampler", distributed_sampler="without a DistributedSampler", **WITHOUT_SAMPLER),
    case(LR, "sampler_wrong_rank", distributed_sampler="set up as rank 0 of 1, not rank 0 of 2"),
    case(
        LR,
        "sampler_unused",
        distributed_sampler=Says("samples from a DataLoader without it", hint="sampler=sampler"),
        **WITHOUT_SAMPLER,
    ),
    case(LR, "no_set_epoch", set_epoch=Says("set_epoch was never called", hint="sampler.set_epoch(epoch)")),
    case(
        LR,
        "set_epoch_after_epoch",
        set_epoch=Says("called after each epoch's batches", hint="before the loop over the DataLoader"),
    ),
    case(
        LR,
        "sampler_before_group",
        problem=Says("Default process group has not been initialized", hint="create the process group first"),
        **stopped_early(),
    ),
    case(
        LR,
        "shuffle_and_sampler",
        problem=Says("mutually exclusive with shuffle", hint="Remove shuffle=True"),
        **stopped_early("process_group"),
    ),
    case(LR, "data_seed_is_rank", same_dataset="data differ from rank 0's"),
    case(LR, "unseeded_data", same_dataset="data differ from rank 0's"),
    case(MNIST, "no_sampler", distributed_sampler="without a DistributedSampler", **WITHOUT_SAMPLER),
    # (3) the model
    case(
        LR,
        "no_ddp",
        distributed_sampler="without a DistributedSampler",
        ddp_wrapped="not wrapped in DistributedDataParallel",
        # Same seed, same shuffle: the copies stay equal, but nothing averaged them.
        weights_in_sync=NONE_AVERAGED,
        **WITHOUT_SAMPLER,
        **NOT_DISTRIBUTED,
    ),
    case(
        LR,
        "no_ddp_with_sampler",
        ddp_wrapped="not wrapped in DistributedDataParallel",
        weights_in_sync="weights differ",
        **NOT_DISTRIBUTED,
    ),
    case(
        LR,
        "ddp_module_forward",
        ddp_wrapped=Says("never called the wrapper", hint="pred = model(x)"),
        weights_in_sync="weights differ",
        **NOT_DISTRIBUTED,
    ),
    case(
        LR,
        "ddp_once_then_plain_model",
        ddp_wrapped=Says("DDP averaged the gradients of 1 of the 320", hint="call the DDP model itself"),
        weights_in_sync="weights differ",
    ),
    case(
        LR,
        "allreduce_by_hand",
        ddp_wrapped=HAND_AVERAGED,
    ),
    *(
        case(LR, submission, world_size, ddp_wrapped=HAND_AVERAGED)
        for submission in ("allreduce_of_scaled_gradients", "loss_over_world_size_summed")
        for world_size in (2, 3)
    ),
    case(
        LR,
        "loss_over_world_size_with_ddp",
        weights_in_sync=Says("divided its loss by the world size, and the gradients were averaged", hint="Drop"),
    ),
    case(
        LR,
        "allreduce_sum_not_mean",
        ddp_wrapped="averaged the gradients itself, with all_reduce",
        weights_in_sync=Says("the sum of the ranks' gradients, not their mean", hint="grad /= world_size"),
    ),
    case(
        LR,
        "optimizer_on_other_model",
        ddp_wrapped="2 of the 2 parameters the optimizer updates are not in the DDP model",
        training="weights did not change",
    ),
    case(LR, "no_optimizer_step", training="never called optimizer.step()"),
    case(LR, "zero_learning_rate", training=Says("weights did not change", hint="learning rate")),
    # (4) rank 0 writes
    case(LR, "all_ranks_save", rank0_checkpoint="Rank 1 also saved a checkpoint"),
    case(LR, "per_rank_checkpoints", rank0_checkpoint="Rank 1 also saved a checkpoint (linear_regression_rank1.pt)"),
    case(LR, "no_checkpoint", rank0_checkpoint="No checkpoint was saved", checkpoint_loadable="saved no checkpoint"),
    case(LR, "module_prefix", checkpoint_loadable=Says("start with 'module.'", hint="model.module.state_dict()")),
    case(LR, "whole_model_saved", checkpoint_loadable=Says("whole model object", hint="state_dict()")),
    case(MNIST, "module_prefix", checkpoint_loadable=Says("start with 'module.'", hint="model.module.state_dict()")),
    # the evaluation (MNIST)
    case(MNIST, "eval_own_share", distributed_eval=OWN_SHARE),
    case(MNIST, "eval_own_share", 3, distributed_eval=OWN_SHARE),
    case(
        MNIST,
        "eval_whole_set_everywhere",
        distributed_eval=Says("evaluated without a DistributedSampler over the 500 test images", hint="shuffle=False"),
    ),
    case(
        MNIST,
        "eval_shares_drawn_not_used",
        distributed_eval=Says("the model was evaluated on none of the images it handed out", hint="model(x)"),
    ),
    case(
        MNIST, "eval_not_returned", distributed_eval=Says("main returned no accuracy on ranks 0 and 1", hint="return")
    ),
    case(
        LR,
        "modules_typo",
        problem=Says("'function' object has no attribute 'state_dict'", hint="model.module, without the s"),
        **stopped_early(*TRAINED_BEFORE_THE_CRASH),
    ),
    case(LR, "empty_checkpoint_file", rank0_checkpoint="the file is empty", checkpoint_loadable="saved no checkpoint"),
    case(LR, "all_ranks_print", rank0_logs=Says('Rank 1 wrote the line "epoch   5  loss', hint="if rank == 0")),
    case(
        LR,
        "loss_print_every_rank",
        rank0_logs=Says('Rank 1 wrote the line "loss: ', hint="in the functions that main calls"),
    ),
    case(LR, "logging_every_rank", rank0_logs=Says('Rank 1 wrote the line "WARNING:', hint="if rank == 0")),
    case(LR, "progress_bar_every_rank", rank0_logs=Says("Rank 1 wrote the line", hint="if rank == 0")),
    case(LR, "print_to_real_stdout", rank0_logs=Says('Rank 1 wrote the line "epoch 1 loss', hint="if rank == 0")),
    case(LR, "os_write_on_every_rank", rank0_logs=Says('Rank 1 wrote the line "epoch 1 loss', hint="if rank == 0")),
    case(LR, "done_on_every_rank"),
    case(LR, "log_file_every_rank", rank0_logs=Says("Rank 1 wrote training.log", hint="if rank == 0")),
    # (5) clean up
    case(LR, "no_destroy", cleanup=Says("without destroying its process group", hint="dist.destroy_process_group()")),
    # the launcher, run as a program
    case(LR, "device_count_world_size", launcher=DEVICE_COUNT_SLIP),
    case(LR, "main_called_directly", launcher=Says("never called mp.spawn", hint="mp.spawn(main")),
    case(MNIST, "device_count_world_size", launcher=DEVICE_COUNT_SLIP),
    # Programs that only look like DDP training gain nothing from the look.
    case(
        LR,
        "blank_main",
        process_group="never called init_process_group",
        distributed_sampler="without a DistributedSampler",
        ddp_wrapped="not wrapped in DistributedDataParallel",
        weights_in_sync="no weights to compare",
        training="never called optimizer.step()",
        rank0_checkpoint="No checkpoint was saved",
        checkpoint_loadable="saved no checkpoint",
        rank0_logs=Says("Rank 0 wrote no training log", hint="if rank == 0: print"),
        cleanup="without destroying its process group",
        launcher=Says("never joined a process group", hint="mp.spawn(main"),
        **WITHOUT_SAMPLER,
    ),
    case(
        LR,
        "serial_program",
        process_group="never called init_process_group",
        distributed_sampler="without a DistributedSampler",
        ddp_wrapped="not wrapped in DistributedDataParallel",
        weights_in_sync=NONE_AVERAGED,
        rank0_checkpoint="every rank wrote the same file",
        rank0_logs='Rank 1 wrote the line "epoch   5  loss',
        cleanup="without destroying its process group",
        launcher="failed before it started any rank",
        **WITHOUT_SAMPLER,
        **NOT_DISTRIBUTED,
    ),
    *(
        case(
            LR,
            "decoy_sampler_and_ddp",
            world_size,
            distributed_sampler=Says("samples from a DataLoader without it", hint="Train on the DataLoader"),
            ddp_wrapped=Says("DDP averaged the gradients of none", hint="call the DDP model itself"),
            weights_in_sync=NONE_AVERAGED,
            **WITHOUT_SAMPLER,
            **NOT_DISTRIBUTED,
        )
        for world_size in (2, 3)
    ),
    # Batches made of other data, behind the sampler's batch or in its memory, gain nothing from the tie.
    case(
        LR,
        "decoy_batch_from_other_loader",
        distributed_sampler=Says("samples from a DataLoader without it", hint="Train on the DataLoader"),
        **WITHOUT_SAMPLER,
    ),
    *(
        case(
            LR,
            submission,
            distributed_sampler=Says("inputs that no DataLoader with that sampler produced", hint="as they come"),
            **WITHOUT_SAMPLER,
        )
        for submission in ("decoy_mixed_into_sampler_batch", "decoy_overwritten_through_a_view")
    ),
    case(
        LR,
        "sampler_yields_everything",
        distributed_sampler=Says("DistributedSampler did not hand out", hint="only its indices"),
    ),
    case(
        LR,
        "broadcast_rank0_gradient",
        ddp_wrapped="DDP averaged the gradients of none",
        weights_in_sync=Says("Every rank applied rank 0's gradient instead of the mean", hint="divide by the world"),
        **NOT_DISTRIBUTED,
    ),
    case(
        LR,
        "forged_records",
        # The forged stream claims a process group, and no packet passed between the ranks.
        problem=Says("but 0 packets passed between them", hint="The grader compares"),
        **stopped_early(),
    ),
    # torchrun: snapshots and resuming after a fault (one run without a fault, one with, one on two nodes).
    case(FT, "reference", 2, skipped=()),
    case(FT, "reference", 3, skipped=()),
    case(
        FT,
        "examples_pattern",
        skipped=(),
        snapshot_rank0=Says("In the two-node run, the worker of global rank 1 (local rank 0 on node 1)", "LOCAL_RANK"),
        snapshot_contents=Says("does not hold the optimizer's state", hint="'optimizer': optimizer.state_dict()"),
        resume_epoch=Says("1 epoch that had finished before the fault ran again", hint="epoch + 1"),
        optimizer_restored=Says("holds no optimizer state", hint="optimizer.load_state_dict"),
        same_result=Says("ended with other weights than the run without one", hint="Resume exactly"),
    ),
    case(
        FT,
        "no_resume",
        skipped=(),
        resumed=Says("rank 0 did not load the snapshot", hint="if the snapshot file exists, load it"),
        resume_epoch=Says("2 epochs that had finished before the fault ran again", hint="epoch + 1"),
        optimizer_restored=Says("loaded no snapshot", hint="Load the snapshot at start-up"),
    ),
    case(
        FT,
        "all_ranks_save",
        skipped=(),
        snapshot_rank0=Says("In the run without a fault, rank 1 also saved snapshot.pt", hint="global rank 0 only"),
    ),
    case(
        FT,
        "snapshot_without_epoch",
        skipped=(),
        snapshot_contents=Says("does not hold the epoch to resume from", hint="'next_epoch': epoch + 1"),
        resumed=Says("then trained all 4 epochs again", hint="range(start_epoch, EPOCHS)"),
        resume_epoch=Says("2 epochs that had finished before the fault ran again", hint="epoch + 1"),
        same_result=Says("ended with other weights than the run without one", hint="Resume exactly"),
    ),
    case(
        FT,
        "rank_from_local_rank",
        skipped=(),
        torchrun_env=Says("In the two-node run: init_process_group was called with rank=0 in the process of rank 1"),
        snapshot_rank0=Says("Could not confirm who saved snapshots: in the two-node run, rank 1 failed"),
    ),
    *(
        case(
            FT,
            submission,
            skipped=(),
            optimizer_restored=Says("rank 0's optimizer did not start from the state in the snapshot"),
            same_result=Says("ended with other weights than the run without one", hint="Resume exactly"),
        )
        for submission in ("fake_optimizer_state", "optimizer_saved_not_loaded")
    ),
    # A worker's exit status is its agent's to tell: a record of a clean exit changes nothing.
    case(
        FT,
        "forged_clean_exit",
        skipped=(),
        problem=Says("Rank 1 failed: the process exited with status 3 before main returned"),
        **torchrun_stopped("weights_in_sync"),
    ),
    case(FT, "crash_after_restart", skipped=(), **after_the_restart("KeyError: 'model_state'")),
    case(
        FT,
        "spawn_inside_torchrun",
        skipped=(),
        problem=Says("torchrun has already started one process per rank", hint="call main() directly"),
        **torchrun_stopped(torchrun_env=Says("called mp.spawn", hint="no mp.spawn")),
    ),
]


# The torchrun rows graded for real: the reference, and a fault whose restart crashes.
# (tests/test_torchrun.py grades a restart that hangs.)
GRADED_TORCHRUN = {"fault_tolerance/fault_tolerance@2", "fault_tolerance/crash_after_restart@2"}
GRADED = [row for row in TABLE if EXERCISES[row.exercise].launcher != "torchrun" or row.id in GRADED_TORCHRUN]
CASES = [pytest.param(row, id=row.id) for row in GRADED]
MESSAGES = [
    pytest.param(row, check_id, says, id=f"{row.id}-{check_id}")
    for row in GRADED
    for check_id, says in row.failed.items()
]


def not_passed(report) -> dict[str, str]:
    return {v.id: f"{v.status}: {v.message}" for v in report.checks if v.status != "passed"}


# --- what the catalogue says of a row, as assertions on its report ----------------


def assert_fails_exactly_the_checks_its_mistake_breaks(row: Case, report) -> None:
    assert failed_ids(report) == set(row.failed), not_passed(report)
    assert {v.id for v in report.checks if v.status == "skipped"} == row.skipped, not_passed(report)
    if not row.failed:
        assert report.passed and report.error is None, report.error
        assert report.score == report.max_score


def assert_the_failure_names_the_mistake(row: Case, check_id: str, says: Says, report) -> None:
    verdict = report.check(check_id)
    assert verdict.status == "failed", verdict.message
    assert says.message in verdict.message, (check_id, verdict.message)
    assert says.hint in verdict.hint, (check_id, verdict.hint)
    assert verdict.reached == says.reached, (check_id, verdict.message)


def assert_a_stopped_run_names_its_cause_with_a_hint(row: Case, report) -> None:
    assert row.problem.message in report.error
    assert row.problem.hint in report.error_hint
    rank = int(re.search(r"[Rr]ank (\d+)", report.error).group(1))  # "Rank N failed: ...", "...: rank N's records"
    # The row of checks not reached names the same rank, and where it stopped when that is known (not for
    # missing records, nor for a process that exited by itself: os._exit leaves no stack).
    unknown = "records" in report.error or "exited with status" in report.error
    assert f"on rank {rank})" in report.stopped_at or (not report.stopped_at and unknown)
    assert all(v.rank == rank for v in report.not_reached), [v.rank for v in report.not_reached]


def assert_failed_checks_cost_their_points_and_give_a_hint(report) -> None:
    failed = [v for v in report.checks if v.status == "failed"]
    assert report.score == report.max_score - sum(v.max_points for v in failed)
    assert all(v.points == 0 for v in failed)
    assert [v.id for v in failed if not v.hint.strip()] == []


def assert_everything_the_row_says(row: Case, report) -> None:
    assert_fails_exactly_the_checks_its_mistake_breaks(row, report)
    for check_id, says in row.failed.items():
        assert_the_failure_names_the_mistake(row, check_id, says, report)
    if row.problem:
        assert_a_stopped_run_names_its_cause_with_a_hint(row, report)
    assert_failed_checks_cost_their_points_and_give_a_hint(report)


# --- the rows, graded for real ---------------------------------------------------


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade each submission once (at one world size) for all the tests that look at it."""
    folder = tmp_path_factory.mktemp("submissions")
    reports = {}

    def report(row: Case):
        key = (row.submission, row.exercise, row.world_size)
        if key not in reports:
            path = (
                REFERENCES[row.exercise]
                if row.submission == "reference"
                else mistakes.write_submission(f"{row.exercise}/{row.submission}", folder / row.exercise)
            )
            reports[key] = grade(path, row.exercise, RunOptions(world_size=row.world_size, backend="gloo"))
        return reports[key]

    return report


@pytest.mark.parametrize("row", CASES)
def test_fails_exactly_the_checks_its_mistake_breaks(graded, row, no_leftover_ranks):
    assert_fails_exactly_the_checks_its_mistake_breaks(row, graded(row))


@pytest.mark.parametrize("row, check_id, says", MESSAGES)
def test_each_failure_names_the_mistake(graded, row, check_id, says, no_leftover_ranks):
    assert_the_failure_names_the_mistake(row, check_id, says, graded(row))


@pytest.mark.parametrize("row", [pytest.param(row, id=row.id) for row in GRADED if row.problem])
def test_a_run_that_stopped_names_its_cause_with_a_hint(graded, row, no_leftover_ranks):
    assert_a_stopped_run_names_its_cause_with_a_hint(row, graded(row))


@pytest.mark.parametrize("row", CASES)
def test_failed_checks_cost_their_points_and_give_a_hint(graded, row, no_leftover_ranks):
    assert_failed_checks_cost_their_points_and_give_a_hint(graded(row))

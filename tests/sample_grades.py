"""What each sample student should score: the one place that says it.

test_nbgrader.py and test_class_grading.py grade the samples and compare
with it; `python -m tools.grade_cells` writes the scores column of
tests/samples/README.md from it. Totals come from the checks' points.
"""

from __future__ import annotations

from autograder.exercises import EXERCISES, by_assignment
from autograder.judge.checks import by_id
from autograder.wording import points

QUIZ_POINTS = {
    "q1_effective_batch_size_test": 1,
    "q2_checkpoint_rank_test": 1,
    "q3_sampler_answer_test": 1,
    "q4a_samples_per_rank_test": 1,
    "q4b_rank_indices_test": 2,
    "q5_ddp_key_prefix_test": 1,
    "q6_scaled_lr_test": 1,
}
TOTAL = {"ddp_intro": sum(QUIZ_POINTS.values())} | {
    e.assignment: sum(by_id(c).points for c in e.graded_checks) for e in EXERCISES.values()
}


def points_of(check_id: str) -> float:
    return by_id(check_id).points


# The grade cells each sample fails, and nothing else.
FAILED_CELLS = {
    ("brook", "ddp_intro"): {
        "q1_effective_batch_size_test": 1,  # a float: the hidden test wants an int
        "q4a_samples_per_rank_test": 1,  # forgot the padding: 3 instead of 4
        "q4b_rank_indices_test": 2,
        "q6_scaled_lr_test": 1,  # keeps the serial learning rate
    },
    ("brook", "linear_regression"): {
        "lr_set_epoch": points_of("set_epoch"),  # never calls set_epoch
        "lr_checkpoint_loadable": points_of("checkpoint_loadable"),  # saves "module." keys
        "lr_launcher": points_of("launcher"),  # starts torch.cuda.device_count() ranks: 0 on a CPU
    },
    ("brook", "mnist_ddp"): {
        "mnist_rank0_checkpoint": points_of("rank0_checkpoint"),  # every rank saves ...
        "mnist_rank0_logs": points_of("rank0_logs"),  # ... and prints
        "mnist_distributed_eval": points_of("distributed_eval"),  # the test accuracy of each rank's share only
    },
    # The slips of a well-known torchrun example: the snapshot holds the epoch just finished and no
    # optimizer state, and LOCAL_RANK guards the save (two writers on two nodes).
    ("brook", "fault_tolerance"): {
        f"ft_{check_id}": points_of(check_id)
        for check_id in ("snapshot_rank0", "snapshot_contents", "resume_epoch", "optimizer_restored", "same_result")
    },
    # Loads the snapshot under a key it was not saved with: the run crashes once restarted.
    ("eve", "fault_tolerance"): {
        f"ft_{check_id}": points_of(check_id)
        for check_id in ("resumed", "resume_epoch", "optimizer_restored", "same_result")
    },
    # No DistributedSampler: the checks of its use have nothing to judge, and give no points.
    ("dana", "linear_regression"): {
        f"lr_{check_id}": points_of(check_id) for check_id in ("distributed_sampler", "same_dataset", "set_epoch")
    },
    # model.modules when saving: the run crashes after 5 epochs. What ran before is judged on its
    # evidence; the checks it never reached fail.
    ("eve", "linear_regression"): {
        f"lr_{check_id}": points_of(check_id)
        for check_id in ("rank0_checkpoint", "checkpoint_loadable", "rank0_logs", "cleanup", "launcher")
    },
    # The quiz cells check exact types, and the DDP cells' outputs come from a grading outside the
    # kernel: every cell fails, as for the release untouched.
    ("mallory", "ddp_intro"): QUIZ_POINTS,
    ("mallory", "linear_regression"): {
        f"lr_{check_id}": points_of(check_id) for check_id in by_assignment("linear_regression").graded_checks
    },
}


def expected_score(student: str, assignment: str) -> float:
    if student in BLANK:
        return 0
    return TOTAL[assignment] - sum(FAILED_CELLS.get((student, assignment), {}).values())


# In tests/samples: cy hands in the release untouched, as test_nbgrader.py's "blank" does.
BLANK = {"blank", "cy"}


def expected_summary(student: str, assignment: str) -> str:
    """'15/18 (set_epoch, launcher)': the score, and the checks lost where some were."""
    total = TOTAL[assignment]
    if student in BLANK:
        return f"0/{points(total)}"
    cells = FAILED_CELLS.get((student, assignment), {})
    exercise = by_assignment(assignment)
    score = f"{points(expected_score(student, assignment))}/{points(total)}"
    if exercise is None or not cells or sum(cells.values()) == total:
        return score
    prefix = f"{exercise.grade_id_prefix}_"
    return f"{score} ({', '.join(cell.removeprefix(prefix) for cell in cells)})"

"""The check of the evaluation (an exercise with a test set): every rank
evaluates its own share of the test set, the ranks combine their counts, and
main returns the accuracy on the whole test set, which the grader measures
itself on the final model."""

from __future__ import annotations

from math import ceil

from ...wording import ranks_text
from ..records import RankRecords, RunRecords
from ..verdict import Outcome, failed, passed
from .registry import cannot_confirm, check

EVALUATION_CHANGE = "Evaluation"
EVALUATE_HINT = (
    "Give the test DataLoader a DistributedSampler(testset, shuffle=False), count the right answers and the "
    "samples on each rank (leaving out the padding's repeats), all_reduce both counts, and return "
    "correct / samples from main on every rank."
)


def _test_shard(r: RankRecords, samples: int) -> list[int] | None:
    """The test set's indices the model evaluated on this rank, in its last whole pass over a DataLoader
    with a DistributedSampler over a data set of the test set's size; None if it had no such pass."""
    samplers = {s["sampler"] for s in r.all("sampler") if (s["dataset"] or {}).get("length") == samples}
    passes = [e for e in r.all("model_fed") if e["sampler"] in samplers and e["finished"]]
    return passes[-1]["evaluated"] if passes else None


@check("distributed_eval", "The test set is evaluated across the ranks", 2, EVALUATION_CHANGE)
def distributed_eval(run: RunRecords) -> Outcome:
    """Passes when every rank evaluated the model on its own share of the test set (the images a
    `DistributedSampler` over it handed out reached the model, the shares together covering it) and `main`
    returned the same accuracy on every rank: the trained model's accuracy on the whole test set, within one
    sample, as the grader measures it (MNIST only)."""
    if not run.all_finished:
        return cannot_confirm(run, "the evaluation on the test set")
    measured = run.ranks[0].first("grader_evaluation")
    if measured is None:
        return failed("There was no model wrapped in DDP to evaluate.", "Wrap the model in DDP first (change 3).", 0)
    samples, truth = measured["samples"], measured["accuracy"]
    returned = [(r.first("main_returned") or {}).get("value") for r in run.ranks]
    missing = [r.rank for r, value in zip(run.ranks, returned, strict=True) if value is None]
    if missing:
        return failed(
            f"main returned no accuracy on {ranks_text(missing)}.",
            f"After training, evaluate the model and return its accuracy from main on every rank. {EVALUATE_HINT}",
            missing[0],
        )
    shards = [_test_shard(r, samples) for r in run.ranks]
    unsharded = [r.rank for r, shard in zip(run.ranks, shards, strict=True) if shard is None]
    if unsharded:
        return failed(
            f"{ranks_text(unsharded).capitalize()} evaluated without a DistributedSampler over the "
            f"{samples} test images: every rank repeated the whole evaluation.",
            EVALUATE_HINT,
            unsharded[0],
        )
    unevaluated = [r.rank for r, shard in zip(run.ranks, shards, strict=True) if not shard]
    if unevaluated:
        return failed(
            f"{ranks_text(unevaluated).capitalize()} went through the test set's DistributedSampler, but the "
            "model was evaluated on none of the images it handed out.",
            f"Evaluate the model on the batches of that DataLoader: for x, y in test_loader: model(x). {EVALUATE_HINT}",
            unevaluated[0],
        )
    if set().union(*shards) != set(range(samples)) or any(len(s) != ceil(samples / run.world_size) for s in shards):
        return failed(
            f"The ranks' shares of the {samples} test images do not split it: each rank must get its own "
            "share, and the shares together the whole test set.",
            f"Create the test set's DistributedSampler with this rank and the world size. {EVALUATE_HINT}",
        )
    differing = [r.rank for r, value in zip(run.ranks, returned, strict=True) if abs(value - returned[0]) > 1e-9]
    if differing:
        return failed(
            f"main returned {returned[0]:.4f} on rank 0 but {returned[differing[0]]:.4f} on rank {differing[0]}: "
            "each rank returned the accuracy of its own share, not of the whole test set.",
            f"Combine the ranks' counts with all_reduce before dividing. {EVALUATE_HINT}",
            differing[0],
        )
    if abs(returned[0] - truth) > 1 / samples + 1e-9:
        return failed(
            f"main returned an accuracy of {returned[0]:.2%}, but the trained model gets {truth:.2%} of the "
            f"{samples} test images right.",
            EVALUATE_HINT,
        )
    return passed(
        f"Every rank evaluated its share of the {samples} test images, and main returned the whole test set's "
        f"accuracy, {truth:.1%}, on every rank."
    )

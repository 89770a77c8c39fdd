"""The checks of the model (change 3): DDP wraps it, the ranks average their
gradients so the weights stay equal, and the model really trained.
"""

from __future__ import annotations

import math

from ...wording import plural
from ..analysis import SYNC_TOLERANCE, relative_distance, relative_spread, weight_spread
from ..records import RankRecords, RunRecords
from ..verdict import Outcome, failed, passed
from .registry import cannot_confirm, check

GRADIENT_TOLERANCE = 1e-3  # relative distance of the applied gradient from the ranks' mean


@check("ddp_wrapped", "Model wrapped in DistributedDataParallel", 2, "Change 3")
def ddp_wrapped(run: RunRecords) -> Outcome:
    """Passes when the model the optimizer trained is wrapped in `DistributedDataParallel`, and a forward of the
    wrapper, with gradients on, came before every optimizer step (so DDP's reducer averaged every step)."""
    for r in run.ranks:
        end = r.first("training_end")
        if end is not None and end["steps"] and end["allreduce_synced_steps"] >= end["steps"]:
            return failed(
                f"Rank {r.rank} averaged the gradients itself, with all_reduce: that is correct data "
                "parallelism, but this exercise asks for DDP to do it.",
                "Wrap the model in DDP, train with the wrapped model, and drop the hand-written all_reduce.",
                r.rank,
            )
        if not r.all("ddp_created"):
            if not run.all_finished and not r.first("first_step"):
                return cannot_confirm(run, "that the model was wrapped")
            return failed(
                f"Rank {r.rank} trained a model that is not wrapped in DistributedDataParallel, so its "
                "gradients were never averaged.",
                "Wrap the model after moving it to its device: model = DDP(model, device_ids=[rank]) on a GPU, "
                "DDP(model) on the CPU.",
                r.rank,
            )
        step = r.first("first_step")
        if step is None and not run.all_finished:
            return cannot_confirm(run, "that the wrapped model was trained")
        if step is not None and step["parameters_in_ddp"] < step["parameters"]:
            return failed(
                f"On rank {r.rank}, {step['parameters'] - step['parameters_in_ddp']} of the "
                f"{step['parameters']} parameters the optimizer updates are not in the DDP model.",
                "Build the optimizer from the wrapped model: optimizer = SGD(model.parameters(), ...) after "
                "model = DDP(model).",
                r.rank,
            )
        forwards = r.first("ddp_forward_calls")
        if forwards is not None and not any(forwards["calls"].values()):
            return failed(
                f"Rank {r.rank} wrapped the model in DDP but never called the wrapper (model.module(x) skips "
                "the gradient averaging).",
                "Call the DDP model itself in training: pred = model(x).",
                r.rank,
            )
        if end is not None and end["steps"] > end["ddp_synced_steps"]:
            averaged = end["ddp_synced_steps"] or "none"
            return failed(
                f"On rank {r.rank}, DDP averaged the gradients of {averaged} of the {end['steps']} optimizer "
                "steps: a step counts when a forward of the DDP model, with gradients on, comes before it "
                "(a forward under torch.no_grad() does not).",
                "In every training step, call the DDP model itself (pred = model(x)) and step the optimizer "
                "built from its parameters.",
                r.rank,
            )
    return passed(
        "The trained model is wrapped in DistributedDataParallel on every rank, and DDP averaged the "
        "gradients of every step."
    )


def _last_weights(r: RankRecords) -> tuple[int, list[float]] | None:
    """(steps, fingerprint) of the latest weights this rank recorded: at the
    end of training, or, for a rank that was stopped, its last snapshot."""
    end = r.first("training_end")
    if end is not None and end["fingerprint"] is not None:
        return end["steps"], end["fingerprint"]
    snapshots = r.all("snapshot")
    return (snapshots[-1]["step"], snapshots[-1]["fingerprint"]) if snapshots else None


def _unsynced(run: RunRecords) -> Outcome | None:
    """A step after which nothing averaged the gradients over the ranks."""
    for r in run.ranks:
        end = r.first("training_end")
        if end is None or not end["steps"]:
            continue
        synced = r.averaged_steps
        if synced < end["steps"]:
            alone = "none" if not synced else f"only {synced}"
            return failed(
                f"On rank {r.rank}, {alone} of the {end['steps']} optimizer steps came after an averaging of the "
                "gradients (DDP, or an all_reduce of them). Weights that stay equal without it come only from "
                "every rank training the same copy on the same data.",
                "Wrap the model in DDP and train with the wrapped model, so each step's gradients are averaged.",
                r.rank,
            )
    return None


def _sampled_gradients(run: RunRecords) -> list[tuple[int, list[dict]]]:
    """(step, each rank's gradients of it) at every sampled step all the ranks recorded."""
    by_step = [{e["step"]: e for e in r.all("step_gradients")} for r in run.ranks]
    common = sorted(set.intersection(*(set(s) for s in by_step))) if by_step else []
    return [(step, [s[step] for s in by_step]) for step in common]


def _loss_over_world_size(gradients: dict, world_size: int) -> bool:
    """The rank's backwards of the step scaled its loss by 1 / world size in all (by 1 / (k * world size)
    each, over k backwards of accumulated gradients)."""
    scales = gradients["loss_scales"]
    return (
        world_size > 1
        and len(set(scales)) == 1
        and math.isclose(scales[0] * len(scales) * world_size, 1.0, rel_tol=1e-6)
    )


def _not_averaged(run: RunRecords) -> Outcome | None:
    """The first sampled step whose applied gradient is not the mean of the ranks' own ones."""
    previous_step, previous_applied = None, []
    for step, gradients in _sampled_gradients(run):
        # Gradients left from the step before (no zero_grad) add to this one's: the averaging is judged alone.
        left = previous_applied if previous_step == step - 1 else None
        problem = _step_not_averaged(step, gradients, left, run.world_size)
        if problem:
            return problem
        previous_step, previous_applied = step, [g["applied_gradient"] for g in gradients]
    return None


def _step_not_averaged(step: int, gradients: list[dict], left: list | None, world_size: int) -> Outcome | None:
    own = [g["own_gradient"] for g in gradients]
    applied = [g["applied_gradient"] for g in gradients]
    if not all(own + applied) or len({len(g) for g in own + applied}) != 1:
        return None

    def all_close_to(target) -> bool:
        return all(relative_distance(a, target) <= GRADIENT_TOLERANCE for a in applied)

    # A loss divided by the world size gives a gradient that much smaller: summed over the ranks, it is the mean.
    scaled = [_loss_over_world_size(g, world_size) for g in gradients]
    contributions = [[x * world_size for x in g] if s else g for g, s in zip(own, scaled, strict=True)]
    mean = [sum(values) / len(own) for values in zip(*contributions, strict=True)]
    own_mean = [sum(values) / len(own) for values in zip(*own, strict=True)]
    if left and _mean_plus_left(applied, mean, left):
        return None
    if any(scaled) and all_close_to(own_mean):
        return failed(
            f"Every rank divided its loss by the world size, and the gradients were averaged as well, so each "
            f"step was {world_size} times smaller than the mean gradient.",
            "Divide the loss by the world size only if you sum the gradients yourself: DDP already averages them. "
            "Drop the division.",
        )
    wrong = [
        r
        for r, a in enumerate(applied)
        if relative_distance(a, mean) > GRADIENT_TOLERANCE and not _scaled_down(a, mean)
    ]
    if not wrong:
        return None
    fix = (
        "Average the gradients over all ranks: let DDP do it, or all_reduce each gradient and divide by the world size."
    )
    if all_close_to([value * len(own) for value in own_mean]):
        return failed(
            "Every rank applied the sum of the ranks' gradients, not their mean.",
            "After all_reduce(grad), divide by the world size: grad /= world_size (DDP does this for you).",
        )
    source = next((k for k in range(len(own)) if all_close_to(own[k])), None)
    if source is not None:
        return failed(
            f"Every rank applied rank {source}'s gradient instead of the mean over the ranks, so the other "
            "ranks' data never reached the model.",
            fix,
        )
    if all(relative_distance(a, o) <= GRADIENT_TOLERANCE for a, o in zip(applied, own, strict=True)):
        return failed("Each rank applied its own gradient: nothing averaged the gradients over the ranks.", fix)
    rank = wrong[0]
    when = "its first step" if step == 0 else f"step {step + 1}"
    return failed(
        f"The gradient rank {rank} applied in {when} is not the mean of the ranks' gradients "
        f"(relative distance {relative_distance(applied[rank], mean):.1e}).",
        fix,
        rank,
    )


def _mean_plus_left(applied: list[list[float]], mean: list[float], left: list[list[float]]) -> bool:
    """Each rank applied the mean plus what it applied the step before (its gradients were not zeroed)."""
    if len({len(g) for g in [mean, *left]}) != 1:
        return False
    return all(
        relative_distance(a, [m + x for m, x in zip(mean, before, strict=True)]) <= GRADIENT_TOLERANCE
        for a, before in zip(applied, left, strict=True)
    )


def _scaled_down(applied: list[float], mean: list[float]) -> bool:
    """The mean, shortened (as gradient clipping does): same direction, smaller length."""
    length = math.sqrt(sum(x * x for x in applied))
    mean_length = math.sqrt(sum(x * x for x in mean))
    if not length or length > mean_length:
        return False
    cosine = sum(a * b for a, b in zip(applied, mean, strict=True)) / (length * mean_length)
    return cosine > 1 - 1e-6


@check("weights_in_sync", "Weights equal on every rank", 2, "Change 3")
def weights_in_sync(run: RunRecords) -> Outcome:
    """Passes when every step's gradients were averaged over the ranks (by DDP, or by an `all_reduce` of the
    gradients), every sampled step applied the mean of the ranks' own gradients (not one rank's, not their sum;
    a sum of gradients of losses divided by the world size is their mean), and the parameters are equal across
    ranks at sampled steps and after training."""
    compared = weight_spread(run)
    for step, spread in compared:
        if spread > SYNC_TOLERANCE:
            return failed(
                f"After step {step} the ranks' weights differ (relative difference {spread:.1e}): each rank "
                "trained its own copy.",
                "Wrap the model in DDP before training and call the wrapped model, so gradients are averaged "
                "over the ranks.",
            )
    problem = _not_averaged(run) or _unsynced(run)  # the mean first: it names a broadcast
    if problem:
        return problem
    if not run.all_finished:
        if not compared:
            return cannot_confirm(run, "that the weights stayed equal")
        return passed(
            f"At all {plural(len(compared), 'step')} recorded before the run stopped (up to step "
            f"{compared[-1][0]}), the weights were the same on all {run.world_size} ranks."
        )
    ends = [r.first("training_end") for r in run.ranks]
    if any(e["fingerprint"] is None for e in ends):
        return failed(
            "No model was trained or wrapped in DDP, so there are no weights to compare.",
            "Wrap the model in DDP and train it with an optimizer.",
        )
    final = relative_spread([e["fingerprint"] for e in ends])
    if final > SYNC_TOLERANCE:
        return failed(
            f"After training the ranks' weights differ (relative difference {final:.1e}).",
            "Let every rank take the same number of steps with the DDP model.",
        )
    return passed(
        f"Every one of the {plural(ends[0]['steps'], 'step')} averaged the gradients over the ranks, and the "
        f"weights are the same on all {run.world_size} ranks."
    )


def _loss_trend(losses: list[float]) -> tuple[float, float, int] | None:
    """The mean loss of the first and the last tenth of the steps, and that tenth's length."""
    if len(losses) < 4:
        return None
    window = max(1, len(losses) // 10)
    return sum(losses[:window]) / window, sum(losses[-window:]) / window, window


@check("training", "The model trained", 1, "Changes 1 to 5")
def training(run: RunRecords) -> Outcome:
    """Passes when the optimizer stepped, the weights changed, the loss fell, and the gradients were averaged over
    the ranks at all."""
    for r in run.ranks:
        first, last = r.first("first_step"), _last_weights(r)
        if first is None or last is None or not last[0]:
            if not r.finished:
                return cannot_confirm(run, "that the model trained")
            return failed(
                f"Rank {r.rank} never called optimizer.step(), so the weights never changed.",
                "In each batch: optimizer.zero_grad(), loss.backward(), optimizer.step().",
                r.rank,
            )
        if relative_spread([first["fingerprint"], last[1]]) < 1e-7:
            return failed(
                f"Rank {r.rank} took {last[0]} optimizer steps but its weights did not change.",
                "Check that loss.backward() runs before optimizer.step() and the learning rate is not zero.",
                r.rank,
            )
        if trained_alone(r):
            return not_distributed(r, "there is no distributed training to judge")
    end = run.ranks[0].first("training_end")
    losses = [value for _, value in end["losses"]] if end else []
    trend = _loss_trend(losses)
    so_far = "" if run.all_finished else " before the run stopped"
    if trend is None:
        return passed(f"The optimizer updated the weights{so_far}.")
    start, final, window = trend
    # The figures the loss chart draws first and last, with the means the judgement compares.
    over = f"rank 0's loss went from {losses[0]:.3g} at the first step to {losses[-1]:.3g} at step {len(losses)}"
    means = f"(means of the first and last {plural(window, 'step')}: {start:.3g} and {final:.3g})"
    if not final < start:
        return failed(
            f"The loss did not fall: {over}{so_far} {means}.",
            "Check the learning rate and that the optimizer updates the model you call.",
            0,
        )
    return passed(f"The loss fell: {over}{so_far} {means}.")


def trained_alone(r: RankRecords) -> bool:
    """It stepped, and no step averaged its gradients with the other ranks."""
    end = r.first("training_end")
    return end is not None and end["steps"] > 0 and not r.averaged_steps


def not_distributed(r: RankRecords, so: str) -> Outcome:
    return failed(
        f"Not checked: rank {r.rank} trained without averaging its gradients with the other ranks (no DDP "
        f"model, no all_reduce of the gradients), so {so}.",
        "Wrap the model in DDP and train with the wrapped model.",
        r.rank,
    )

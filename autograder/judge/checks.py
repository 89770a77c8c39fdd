"""The checks: each one an id, its points, and a pure function of the run's
records that returns passed, failed (with a hint) or skipped.

Adding a check is one decorated function here (then its catalogue rows in
tests/mistakes.py and a run of `python -m tools.grade_cells`, which writes
its grade cells). The order below is the order of the report, and roughly the
order of the five DDP changes.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..disk import CHECKPOINT_SUFFIXES, PROBLEMS, is_saved_by_torch
from ..launch import MAX_OWN_LAUNCHER_RANKS, RankStatus
from ..wording import plural, ranks_text
from .events import parse
from .records import RankRecords, RunRecords, TorchrunJobRecords
from .tampering import TAMPERING_HINT, contradictions
from .verdict import FAILED, SKIPPED, Outcome, Verdict, failed, not_reached, passed, skipped

SYNC_TOLERANCE = 1e-4  # relative spread of the parameter fingerprints
GRADIENT_TOLERANCE = 1e-3  # relative distance of the applied gradient from the ranks' mean


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    points: float
    change: str  # which of the five DDP changes it checks, as the notebooks' grade cells say
    judge: Callable[[RunRecords], Outcome]
    # Graded checks get a grade cell. gpu_device does not: the grading
    # machines have no GPU, so a cell would check nothing there.
    graded: bool = True
    # Why the check cannot apply to a run on this machine, or None when it can.
    # A check that cannot apply counts 0 of 0 points: the score is out of
    # what this machine can check.
    cannot_apply: Callable[[RunRecords], str | None] | None = None


CHECKS: list[Check] = []


def check(
    check_id: str,
    title: str,
    points: float,
    change: str,
    graded: bool = True,
    cannot_apply: Callable[[RunRecords], str | None] | None = None,
):
    def register(judge):
        CHECKS.append(Check(check_id, title, points, change, judge, graded, cannot_apply))
        return judge

    return register


def by_id(check_id: str) -> Check:
    for item in CHECKS:
        if item.id == check_id:
            return item
    raise ValueError(f"Unknown check {check_id!r}; known checks: {', '.join(c.id for c in CHECKS)}.")


def run_checks(run: RunRecords, check_ids) -> list[Verdict]:
    verdicts = []
    for item in (by_id(i) for i in check_ids):
        reason = item.cannot_apply(run) if item.cannot_apply else None
        if reason:
            verdicts.append(Verdict(item.id, item.title, SKIPPED, 0.0, 0.0, reason))
            continue
        try:
            outcome = _not_runnable(run) or item.judge(run)
        except Exception as error:  # records no probe wrote: forged, or cut short in a way not foreseen
            outcome = failed(
                f"Not checked: the run's records are incomplete or malformed ({type(error).__name__}).",
                "If your code does not write to the grader's files, tell your instructor.",
            )
        if outcome.status == SKIPPED and not run.all_finished:
            # Fail closed: "does not apply" is only known of a run that finished.
            rank = _stopping_rank(run)
            outcome = not_reached(f"Not checked: {run.why_not_reached(rank)}.", rank)
        earned = 0.0 if outcome.status == FAILED else item.points
        verdicts.append(
            Verdict(
                item.id,
                item.title,
                outcome.status,
                earned,
                item.points,
                outcome.message,
                outcome.hint,
                outcome.rank,
                outcome.reached,
            )
        )
    return verdicts


def _not_runnable(run: RunRecords) -> Outcome | None:
    if run.problem is not None:
        return Outcome(FAILED, "Not checked: the code could not run.", run.problem.hint, reached=False)
    if not run.has_every_rank:
        return failed(
            f"Not checked: the run's records are incomplete (records of {len(run.ranks)} of {run.world_size} ranks).",
            "This is a problem of the grading machine; tell your instructor.",
        )
    tampered = next((r for r in run.ranks if r.malformed), None)
    if tampered is not None:
        return not_reached(f"Not checked: {run.why_not_reached(tampered.rank)}.", tampered.rank)
    found = contradictions(run)
    if found:
        return failed(f"Not checked: tampering detected: {found[0]}.", TAMPERING_HINT)
    return None


def _stopping_rank(run: RunRecords) -> int:
    """The rank that stopped the run, as the report's headline names it."""
    rank = run.root_cause_rank
    if rank is None:  # the launcher saw every rank finish: the first whose records say otherwise, else rank 0
        rank = next((r.rank for r in run.ranks if not r.finished), 0)
    return rank


def _cannot_confirm(run: RunRecords, what: str) -> Outcome:
    """Fail closed: a run that stopped before the evidence proves nothing."""
    rank = _stopping_rank(run)
    return not_reached(f"Could not confirm {what}: {run.why_not_reached(rank)}.", rank)


# --- (1) process group ------------------------------------------------------


@check("process_group", "Process group created", 2, "Change 1")
def process_group(run: RunRecords) -> Outcome:
    # A refused call is the cause; a rank stopped before its own call is only a consequence.
    for r in sorted(run.ranks, key=lambda r: r.first("init_refused") is None):
        calls = r.all("init_process_group")
        if not calls:
            if not r.finished:
                return _cannot_confirm(run, "that every rank created the process group")
            return failed(
                f"Rank {r.rank} never called init_process_group.",
                "Call dist.init_process_group(backend, rank=rank, world_size=world_size) at the start of main.",
                r.rank,
            )
        refused = r.first("init_refused")
        if refused is not None:
            return failed(f"Rank {r.rank}: {refused['reason']}", refused["hint"], r.rank)
        if len(calls) > 1:
            return failed(
                f"Rank {r.rank} called init_process_group {len(calls)} times.",
                "Create the process group once per rank, at the start of main.",
                r.rank,
            )
        ready = r.first("process_group_ready")
        if ready is None:
            return failed(
                f"Rank {r.rank} called init_process_group, but the group was never ready "
                f"({run.why_not_reached(r.rank)}).",
                "Look at the error above: the group could not be created.",
                r.rank,
            )
        if ready["backend"] != run.backend:
            return failed(
                f"Rank {r.rank} created its process group with the {ready['backend']} backend, but this run "
                f"uses {run.backend}.",
                "Use 'nccl' when there is a GPU per rank and 'gloo' on the CPU: "
                "'nccl' if torch.cuda.is_available() else 'gloo'.",
                r.rank,
            )
    return passed(f"All {run.world_size} ranks joined one {run.backend} process group, each with its own rank.")


# --- (2) the data: DistributedSampler ---------------------------------------


def training_sampler(r: RankRecords) -> tuple[dict, list[dict]] | None:
    """The DistributedSampler whose samples the model was fed most of, and
    what the model was fed from it in each pass over its DataLoader."""
    epochs_by_sampler: dict[int, list[dict]] = {}
    for epoch in r.all("model_fed"):
        epochs_by_sampler.setdefault(epoch["sampler"], []).append(epoch)
    fed = {s: sum(len(e["indices"]) for e in epochs) for s, epochs in epochs_by_sampler.items()}
    if not any(fed.values()):
        return None
    busiest = max(fed, key=fed.get)
    config = next((s for s in r.all("sampler") if s["sampler"] == busiest), None)
    return (config, [e for e in epochs_by_sampler[busiest] if e["indices"]]) if config else None


def _drawn(r: RankRecords, sampler: int, epoch: int) -> set[int]:
    """The indices a DistributedSampler's own iterator handed out in an epoch."""
    return {i for e in r.all("sampler_epoch") if e["sampler"] == sampler and e["epoch"] == epoch for i in e["indices"]}


def _fed(r: RankRecords) -> dict:
    return r.first("model_inputs") or parse({"kind": "model_inputs"})  # none recorded: the schema's zeros


def _sampler_not_fed(r: RankRecords) -> Outcome:
    """Rank r made a DistributedSampler, and none of its samples reached the model: what did?"""
    fed = _fed(r)
    if fed["plain_rows"]:
        return failed(
            f"Rank {r.rank} created a DistributedSampler, but its model trained on {fed['plain_rows']} "
            "samples from a DataLoader without it, so every rank trained on the whole data set.",
            "Train on the DataLoader that has the sampler: DataLoader(dataset, batch_size=..., "
            "sampler=sampler), then `for x, y in loader:`.",
            r.rank,
        )
    if fed["unmatched_rows"]:
        return failed(
            f"Rank {r.rank} created a DistributedSampler, but its model trained on inputs that no "
            "DataLoader with that sampler produced.",
            "Feed the model the batches of the DataLoader that has the sampler, as they come: "
            "for x, y in loader: model(x.to(device)).",
            r.rank,
        )
    return failed(
        f"Rank {r.rank} created a DistributedSampler, but none of its samples reached the model in training.",
        "Pass it to the DataLoader you train with: DataLoader(dataset, batch_size=..., sampler=sampler).",
        r.rank,
    )


def _no_sampler_used(run: RunRecords) -> Outcome | None:
    for r in run.ranks:
        if training_sampler(r) is None:
            if not run.all_finished:
                return _cannot_confirm(run, "which data each rank read")
            if r.all("sampler"):
                return _sampler_not_fed(r)
            plain = r.first("plain_sampler_epoch")
            seen = (
                f" (it read all {len(plain['indices'])} samples in each epoch)" if plain and plain["finished"] else ""
            )
            return failed(
                f"Rank {r.rank} read its data without a DistributedSampler, so every rank trained on the whole "
                f"data set{seen}.",
                "Give the DataLoader sampler=DistributedSampler(dataset, num_replicas=world_size, rank=rank) "
                "and drop shuffle=True from the DataLoader.",
                r.rank,
            )
    return None


def _partition_problem(
    run: RunRecords, size: int, drop_last: bool, epoch_number: int, per_rank: list[list[int]]
) -> Outcome | None:
    per_rank_count = size // run.world_size if drop_last else math.ceil(size / run.world_size)
    padding = 0 if drop_last else per_rank_count * run.world_size - size
    owners: dict[int, set[int]] = {}
    for rank, indices in enumerate(per_rank):
        for index in indices:
            owners.setdefault(index, set()).add(rank)
    counts = Counter(i for indices in per_rank for i in set(indices))
    shared = sorted(i for i, c in counts.items() if c > 1)
    if len(shared) > padding:
        ranks = sorted({rank for i in shared for rank in owners[i]})
        return failed(
            f"In epoch {epoch_number}, {ranks_text(ranks)} read {len(shared)} of the same samples "
            f"(for example indices {', '.join(map(str, shared[:5]))}).",
            "Each rank should read its own share: give DistributedSampler num_replicas=world_size and rank=rank.",
        )
    missing = sorted(set(range(size)) - set(counts))
    if not drop_last and missing:
        return failed(
            f"In epoch {epoch_number}, no rank read {len(missing)} of the {size} samples (for example indices "
            f"{', '.join(map(str, missing[:5]))}).",
            "Let every rank iterate its whole DataLoader in every epoch.",
        )
    return None


@check("distributed_sampler", "DistributedSampler splits the data", 3, "Change 2a")
def distributed_sampler(run: RunRecords) -> Outcome:
    problem = _no_sampler_used(run)
    if problem:
        return problem
    samplers = [training_sampler(r) for r in run.ranks]
    for r, (config, _) in zip(run.ranks, samplers, strict=True):
        if config["num_replicas"] != run.world_size or config["rank"] != r.rank:
            return failed(
                f"Rank {r.rank}'s DistributedSampler was set up as rank {config['rank']} of {config['num_replicas']}, "
                f"not rank {r.rank} of {run.world_size}.",
                "Pass the rank and world size that main receives: DistributedSampler(dataset, "
                "num_replicas=world_size, rank=rank).",
                r.rank,
            )
    for r in run.ranks:
        fed = _fed(r)
        from_sampler = sum(len(e["indices"]) for e in training_sampler(r)[1])
        if fed["plain_rows"] > from_sampler:
            return failed(
                f"Rank {r.rank}'s model trained on more samples from a DataLoader without the DistributedSampler "
                f"({fed['plain_rows']}) than from the one with it ({from_sampler}).",
                "Train on the DataLoader that has the sampler only.",
                r.rank,
            )
    for r, (config, passes) in zip(run.ranks, samplers, strict=True):
        for number, fed in enumerate(passes, start=1):
            drawn = _drawn(r, config["sampler"], fed["epoch"])
            extra = sorted(set(fed["indices"]) - drawn)
            if extra:
                return failed(
                    f"In epoch {number}, rank {r.rank}'s model was fed {len(extra)} samples that its "
                    f"DistributedSampler did not hand out (it handed out {len(drawn)}; for example index "
                    f"{extra[0]} was not one of them).",
                    "Use DistributedSampler as it is: a subclass or a wrapper of it must yield only its indices.",
                    r.rank,
                )
    size = samplers[0][0]["dataset"]["length"] if samplers[0][0]["dataset"] else None
    if size is None:
        return failed("The data set's length could not be read.", "Use a data set with a __len__.")
    epochs = min(len(epochs) for _, epochs in samplers)
    for number in range(epochs):
        passes = [epochs[number] for _, epochs in samplers]
        # Samples may go unused only where the sampler or the DataLoader drops them, or a pass ended early.
        whole = all(p["finished"] and not p["drop_last"] for p in passes) and not samplers[0][0]["drop_last"]
        problem = _partition_problem(run, size, not whole, number + 1, [p["indices"] for p in passes])
        if problem:
            return problem
    share = len(samplers[0][1][0]["indices"])
    return passed(
        f"Each of the {run.world_size} ranks trained on its own share (about {share} of {size} samples) in each "
        f"of {epochs} epoch(s)."
    )


def _needs_sampler(run: RunRecords, what: str) -> Outcome | None:
    """A check of the sampler's use has nothing to judge without one, and gives no points for that."""
    problem = _no_sampler_used(run)
    if problem is None or not problem.reached:
        return problem
    return failed(
        f"Not checked: {what} needs the model to train on a DistributedSampler's samples, and rank "
        f'{problem.rank} did not (see "{by_id("distributed_sampler").title}").',
        "Give the DataLoader you train with a DistributedSampler first.",
        problem.rank,
    )


@check("same_dataset", "Every rank has the same data set", 1, "Change 2a")
def same_dataset(run: RunRecords) -> Outcome:
    problem = _needs_sampler(run, "comparing the ranks' data sets")
    if problem:
        return problem
    datasets = [training_sampler(r)[0]["dataset"] for r in run.ranks]
    if any(d is None for d in datasets):
        return failed(
            "The data set could not be read for comparison.", "Use a data set that supports len() and indexing."
        )
    reference = datasets[0]
    fix = (
        "Build the data once with a fixed seed (for example torch.Generator().manual_seed(0)), or load the "
        "same file on every rank."
    )
    for rank, data in enumerate(datasets[1:], start=1):
        if data["length"] != reference["length"]:
            return failed(
                f"Rank {rank}'s data set has {data['length']} samples but rank 0's has {reference['length']}.",
                fix,
                rank,
            )
        differing = [i for i, h in data["items"].items() if reference["items"].get(i) not in (None, h)]
        if differing:
            return failed(
                f"Rank {rank}'s data differ from rank 0's: samples at indices {', '.join(differing[:5])} are "
                "not the same. "
                "The sampler hands out distinct indices, but into different data.",
                fix,
                rank,
            )
        if data["content"] != reference["content"]:
            return failed(f"Rank {rank}'s data set holds different values from rank 0's.", fix, rank)
    return passed(f"All ranks built the same data set ({reference['length']} samples, identical contents).")


@check("set_epoch", "set_epoch reshuffles every epoch", 1, "Change 2b")
def set_epoch(run: RunRecords) -> Outcome:
    problem = _needs_sampler(run, "the shuffle of each epoch")
    if problem:
        return problem
    config, epochs = training_sampler(run.ranks[0])
    if not config["shuffle"]:
        return skipped("The sampler does not shuffle, so there is no order to renew.")
    if len(epochs) < 2:
        return skipped("Training ran a single epoch.")
    seen = [e["epoch"] for e in epochs]
    if len(seen) > 2 and seen[0] == seen[1] and seen[1:] == list(range(seen[1], seen[1] + len(seen) - 1)):
        return failed(
            "set_epoch is called after each epoch's batches instead of before them: the second epoch repeated "
            "the first one's shuffle, and each later epoch used the number of the epoch before it.",
            "Call sampler.set_epoch(epoch) at the start of the epoch, before the loop over the DataLoader.",
            0,
        )
    if len(set(seen)) < len(seen):
        return failed(
            f"The sampler shuffled the same way in every one of the {len(seen)} epochs (set_epoch was "
            f"{'never called' if set(seen) == {0} else 'called with repeated values'}).",
            "Call sampler.set_epoch(epoch) at the start of each epoch, before iterating the DataLoader.",
            0,
        )
    return passed(f"Each of the {len(seen)} epochs had its own shuffle.")


# --- (3) the model: DDP -------------------------------------------------------


@check("ddp_wrapped", "Model wrapped in DistributedDataParallel", 2, "Change 3")
def ddp_wrapped(run: RunRecords) -> Outcome:
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
                return _cannot_confirm(run, "that the model was wrapped")
            return failed(
                f"Rank {r.rank} trained a model that is not wrapped in DistributedDataParallel, so its "
                "gradients were never averaged.",
                "Wrap the model after moving it to its device: model = DDP(model, device_ids=[rank]) on a GPU, "
                "DDP(model) on the CPU.",
                r.rank,
            )
        step = r.first("first_step")
        if step is None and not run.all_finished:
            return _cannot_confirm(run, "that the wrapped model was trained")
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


def _spread(fingerprints: list[list[float]]) -> float:
    return max(_distance(fp, fingerprints[0]) for fp in fingerprints)


def weight_spread(run: RunRecords) -> list[tuple[int, float]]:
    """(step, relative spread of the weights across ranks) at each step every rank recorded."""
    by_step = [{e["step"]: e["fingerprint"] for e in r.all("snapshot")} for r in run.ranks]
    common = sorted(set.intersection(*(set(s) for s in by_step))) if by_step else []
    return [(step, _spread([s[step] for s in by_step])) for step in common]


def _last_weights(r: RankRecords) -> tuple[int, list[float]] | None:
    """(steps, fingerprint) of the latest weights this rank recorded: at the
    end of training, or, for a rank that was stopped, its last snapshot."""
    end = r.first("training_end")
    if end is not None and end["fingerprint"] is not None:
        return end["steps"], end["fingerprint"]
    snapshots = r.all("snapshot")
    return (snapshots[-1]["step"], snapshots[-1]["fingerprint"]) if snapshots else None


def _distance(a: list[float], b: list[float]) -> float:
    """Relative distance of a from b."""
    scale = max(1e-12, math.sqrt(sum(x * x for x in b)))
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=False))) / scale


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


def _not_averaged(run: RunRecords) -> Outcome | None:
    """The first step's applied gradient, against the mean of the ranks' own gradients."""
    steps = [r.first("first_step") for r in run.ranks]
    if any(s is None or not s["local_gradient"] or not s["applied_gradient"] for s in steps):
        return None
    own = [s["local_gradient"] for s in steps]
    applied = [s["applied_gradient"] for s in steps]
    if len({len(g) for g in own + applied}) != 1:
        return None
    mean = [sum(values) / len(own) for values in zip(*own, strict=True)]
    wrong = [r for r, a in enumerate(applied) if _distance(a, mean) > GRADIENT_TOLERANCE and not _scaled_down(a, mean)]
    if not wrong:
        return None

    def all_close_to(target) -> bool:
        return all(_distance(a, target) <= GRADIENT_TOLERANCE for a in applied)

    fix = (
        "Average the gradients over all ranks: let DDP do it, or all_reduce each gradient and divide by the world size."
    )
    if all_close_to([value * len(own) for value in mean]):
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
    if all(_distance(a, o) <= GRADIENT_TOLERANCE for a, o in zip(applied, own, strict=True)):
        return failed("Each rank applied its own gradient: nothing averaged the gradients over the ranks.", fix)
    rank = wrong[0]
    return failed(
        f"The gradient rank {rank} applied in its first step is not the mean of the ranks' gradients "
        f"(relative distance {_distance(applied[rank], mean):.1e}).",
        fix,
        rank,
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
            return _cannot_confirm(run, "that the weights stayed equal")
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
    final = _spread([e["fingerprint"] for e in ends])
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
    for r in run.ranks:
        first, last = r.first("first_step"), _last_weights(r)
        if first is None or last is None or not last[0]:
            if not r.finished:
                return _cannot_confirm(run, "that the model trained")
            return failed(
                f"Rank {r.rank} never called optimizer.step(), so the weights never changed.",
                "In each batch: optimizer.zero_grad(), loss.backward(), optimizer.step().",
                r.rank,
            )
        if _spread([first["fingerprint"], last[1]]) < 1e-7:
            return failed(
                f"Rank {r.rank} took {last[0]} optimizer steps but its weights did not change.",
                "Check that loss.backward() runs before optimizer.step() and the learning rate is not zero.",
                r.rank,
            )
        if _trained_alone(r):
            return _not_distributed(r, "there is no distributed training to judge")
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


def _trained_alone(r: RankRecords) -> bool:
    """It stepped, and no step averaged its gradients with the other ranks."""
    end = r.first("training_end")
    return end is not None and end["steps"] > 0 and not r.averaged_steps


def _not_distributed(r: RankRecords, so: str) -> Outcome:
    return failed(
        f"Not checked: rank {r.rank} trained without averaging its gradients with the other ranks (no DDP "
        f"model, no all_reduce of the gradients), so {so}.",
        "Wrap the model in DDP and train with the wrapped model.",
        r.rank,
    )


# --- (4) rank 0 writes ----------------------------------------------------------


def _checkpoints_by_rank(run: RunRecords) -> dict[int, list[str]]:
    written = {}
    for r in run.ranks:
        paths = [e["path"] or "(a file object)" for e in r.all("torch_save")]
        paths += [
            e["path"]
            for e in r.all("file_written")
            if e["path"].endswith(CHECKPOINT_SUFFIXES) and e["path"] not in paths
        ]
        written[r.rank] = paths
    return written


@check("rank0_checkpoint", "Only rank 0 saves checkpoints", 2, "Change 4")
def rank0_checkpoint(run: RunRecords) -> Outcome:
    written = _checkpoints_by_rank(run)
    others = {rank: paths for rank, paths in written.items() if rank != 0 and paths}
    if others:
        rank, paths = next(iter(others.items()))
        shared = paths[0] in written.get(0, [])
        return failed(
            f"Rank {rank} also saved a checkpoint ({os.path.basename(paths[0])})"
            f"{': every rank wrote the same file' if shared else ''}.",
            "Save from one rank only: put torch.save(...) under `if rank == 0:`.",
            rank,
        )
    if not run.all_finished:
        return _cannot_confirm(run, "who saved checkpoints")
    if not written.get(0):
        return failed(
            "No checkpoint was saved.", "Save the model from rank 0 with torch.save(...) during or after training.", 0
        )
    # A checkpoint is what the grader itself finds in the file, not the name or the call.
    saved = [p for p in written[0] if p in run.checkpoints and is_saved_by_torch(run.checkpoints[p])]
    if not saved:
        return failed(_not_a_checkpoint(run, written[0][-1]), CHECKPOINT_HINT, 0)
    return passed(
        f"Only rank 0 saved checkpoints ({plural(len(written[0]), 'save')}; the grader opened "
        f"{os.path.basename(saved[-1])})."
    )


CHECKPOINT_HINT = "Save the model's state from rank 0: torch.save(model.module.state_dict(), PATH)."


def _not_a_checkpoint(run: RunRecords, path: str) -> str:
    found = run.checkpoints.get(path, {"problem": "missing", "error": ""})
    why = PROBLEMS.get(found["problem"], "it could not be checked")
    detail = f" ({found['error']})" if found.get("error") else ""
    return f"Rank 0 wrote {os.path.basename(path)}, but it is not a checkpoint: {why}{detail}."


@check("checkpoint_loadable", "Checkpoint loads into the plain model", 1, "Change 4")
def checkpoint_loadable(run: RunRecords) -> Outcome:
    load = run.ranks[0].first("checkpoint_load")
    if load is None:
        if not run.all_finished:
            return _cannot_confirm(run, "that the checkpoint loads")
        return failed(
            "Rank 0 saved no checkpoint to load.", "Save model.module.state_dict() from rank 0 with torch.save.", 0
        )
    if _trained_alone(run.ranks[0]):
        return _not_distributed(run.ranks[0], "the checkpoint holds no model of distributed training")
    on_disk = run.checkpoints.get(load["path"] or "")
    if on_disk is None or not is_saved_by_torch(on_disk):
        return failed(_not_a_checkpoint(run, load["path"] or "(a file object)"), CHECKPOINT_HINT, 0)
    if load["ok"]:
        return passed(f"The saved model state loads into a plain {load['model']} with strict=True.")
    problem = load.get("problem")
    if problem == "strict_load" and "module." in load.get("error", ""):
        return failed(
            "The saved keys start with 'module.' (the DDP wrapper's name), so they do not load into the plain model.",
            "Save model.module.state_dict() instead of model.state_dict().",
            0,
        )
    if problem == "strict_load":
        return failed(
            f"The saved state does not load into the plain model: {load['error'].splitlines()[0][:300]}",
            "Save the trained model's own state: model.module.state_dict().",
            0,
        )
    if problem == "whole_module":
        return failed(
            "The checkpoint holds a whole model object rather than its state dict.",
            "Save model.module.state_dict() (alone or in a dict), which loads without your class's pickled code.",
            0,
        )
    return failed(
        "The checkpoint holds no model state dict.",
        "Save model.module.state_dict(), alone or in a dict such as {'model_state_dict': ...}.",
        0,
    )


def _lines(r: RankRecords) -> list[tuple[str, int, str]]:
    """(template, times, first line) of what reached this rank's output pipe,
    as the launcher tallied it: the most written first."""
    return [(str(t), n, str(e)) for t, n, e in (r.outcome.lines if r.outcome else [])]


def _log_files(r: RankRecords) -> list[str]:
    return [e["path"] for e in r.all("file_written") if not e["path"].endswith(CHECKPOINT_SUFFIXES)]


@check("rank0_logs", "Only rank 0 writes logs", 1, "Change 4")
def rank0_logs(run: RunRecords) -> Outcome:
    if not run.all_finished:
        return _cannot_confirm(run, "who wrote the logs")
    for r in run.ranks[1:]:
        logs = _log_files(r)
        if logs:
            return failed(
                f"Rank {r.rank} wrote {os.path.basename(logs[0])}; every rank wrote its own copy of the log.",
                "Write log files from rank 0 only: `if rank == 0:`.",
                r.rank,
            )
    for r in run.ranks[1:]:
        # A training log repeats a line (its numbers aside) every step or
        # epoch; a word such as "Done!" on every rank does not.
        repeated = next(((t, n, e) for t, n, e in _lines(r) if n >= 2), None)
        if repeated:
            template, times, example = repeated
            return failed(
                f'Rank {r.rank} wrote the line "{example}" {times} times, each time with other numbers '
                f'("{template}"): the training log is repeated by every rank.',
                "Put each progress print or log call under `if rank == 0:`, including the ones in the "
                "functions that main calls, such as the training loop.",
                r.rank,
            )
    rank0 = run.ranks[0]
    if not _log_files(rank0) and not any("#" in t for t, _, _ in _lines(rank0)):
        return failed(
            "Rank 0 wrote no training log: no line with a number in it (an epoch, a loss) and no log file.",
            'Let rank 0 report the training as it goes: if rank == 0: print(f"epoch {epoch}  loss {loss:.4f}").',
            0,
        )
    return passed("Rank 0 wrote the training log, and the other ranks wrote no line more than once.")


# --- (5) clean up -----------------------------------------------------------------


@check("cleanup", "Process group destroyed", 1, "Change 5")
def cleanup(run: RunRecords) -> Outcome:
    if not run.all_finished:
        return _cannot_confirm(run, "that the process group was destroyed")
    for r in run.ranks:
        end = r.first("rank_end")
        destroyed = any(e["default_group"] for e in r.all("destroy_process_group"))
        if not destroyed or end["process_group_still_initialized"]:
            return failed(
                f"Rank {r.rank} returned from main without destroying its process group.",
                "Call dist.destroy_process_group() at the end of main, in a `finally:` block so it runs after "
                "an error too.",
                r.rank,
            )
    return passed("Every rank destroyed its process group before returning.")


# --- the launcher: `python FILE` ---------------------------------------------------

LAUNCHER_HINT = (
    'At the bottom of the file: if __name__ == "__main__": world_size = ...; '
    "mp.spawn(main, args=(world_size,), nprocs=world_size)."
)


@check("launcher", "Your launcher starts the ranks", 1, "The launcher")
def launcher(run: RunRecords) -> Outcome:
    # The launcher is run once the graded ranks have finished: it repeats their work.
    if not run.all_finished:
        return _cannot_confirm(run, "that your launcher starts the ranks")
    own = run.own_launcher
    if own is None:
        return failed("Your launcher was not run.", "This is a problem of the grading machine; tell your instructor.")
    calls, done, joined = own.all("spawn_called"), own.first("launcher_done"), own.first("spawn_joined")
    status = own.outcome.status if own.outcome else None
    if not calls:
        if done is not None and done["failed"]:
            return failed(
                f"When your file was run as a program, it failed before it started any rank: {done['error']}",
                "Fix that error; it happens outside main, in the code that runs when the file is run.",
            )
        return failed(
            "When your file was run as a program, it started no ranks: it never called mp.spawn or start_processes.",
            LAUNCHER_HINT,
        )
    asked = calls[0]
    if own.first("spawn_refused") is not None or asked["nprocs"] in (0, "0"):
        if asked["gpus"] == 0 and asked["nprocs"] in (0, "0"):
            return failed(
                "Your launcher asked for 0 processes: torch.cuda.device_count() is 0 on a machine without a GPU, "
                "so nothing ran.",
                "Fall back to CPU processes when there is no GPU: world_size = torch.cuda.device_count() or 2.",
            )
        return failed(
            f"Your launcher asked for nprocs={asked['nprocs']} processes, which the grader cannot start.",
            f"Start 1 to {MAX_OWN_LAUNCHER_RANKS} processes: nprocs=world_size with a world_size of 1 or more.",
        )
    if status == RankStatus.HUNG:
        return failed(
            f"The {plural(asked['nprocs'], 'rank')} your launcher started did not finish in time.",
            "Run the file yourself: `python FILE` must end once training has.",
        )
    if joined is None or joined["error"]:
        why = joined["error"].strip().splitlines()[-1] if joined and joined["error"].strip() else "it did not end"
        return failed(
            f"Not every rank your launcher started finished: {why}",
            "Run the file yourself (`python FILE`) and fix the first error it shows.",
        )
    if status != RankStatus.FINISHED or done is None or done["failed"]:
        error = done["error"] if done else "it was stopped"
        return failed(
            f"Your ranks finished, but the program then failed: {error}", "Let the program end after mp.spawn returns."
        )
    started = run.own_launcher_ranks
    idle = [r.rank for r in started if r.first("process_group_ready") is None]
    if len(started) < asked["nprocs"] or idle:
        return failed(
            f"Your launcher started {plural(asked['nprocs'], 'rank')}, but "
            f"{ranks_text(idle) if idle else 'not all of them'} never joined a process group: the function it "
            "started is not your DDP main.",
            "Start main itself: mp.spawn(main, args=(world_size,), nprocs=world_size).",
        )
    return passed(
        f"Run as a program, your file started {plural(asked['nprocs'], 'rank')}; all joined a process group and "
        "finished."
    )


# --- GPU runs -----------------------------------------------------------------------


def _no_gpus(run: RunRecords) -> str | None:
    if run.backend == "nccl":
        return None
    return "Not counted on this machine: the run is on the CPU, with no GPUs to place ranks on."


@check("gpu_device", "Each rank on its own GPU", 1, "Change 1", graded=False, cannot_apply=_no_gpus)
def gpu_device(run: RunRecords) -> Outcome:
    for r in run.ranks:
        init = r.first("init_process_group")
        if init is None:
            return _cannot_confirm(run, "GPU placement")
        if not init["set_device_calls"]:
            return failed(
                f"Rank {r.rank} created its process group before choosing its GPU.",
                "Call torch.cuda.set_device(rank) before dist.init_process_group.",
                r.rank,
            )
        if init["set_device_calls"][-1] not in (str(r.rank), f"cuda:{r.rank}"):
            return failed(
                f"Rank {r.rank} chose GPU {init['set_device_calls'][-1]} instead of cuda:{r.rank}.",
                "Use the rank as the device: torch.cuda.set_device(rank).",
                r.rank,
            )
        ddp = r.first("ddp_created")
        if ddp and ddp["devices"] != [f"cuda:{r.rank}"]:
            return failed(
                f"Rank {r.rank}'s model is on {', '.join(ddp['devices'])}, not cuda:{r.rank}.",
                "Move the model to its own GPU before wrapping it: model.to(rank).",
                r.rank,
            )
    return passed("Each rank set its own GPU (cuda:<rank>) before creating the process group.")


# --- (6) torchrun: fault tolerance --------------------------------------------------
# The checks of a torchrun program (the fault_tolerance exercise). Each judges
# the records of the grading's three torchrun jobs (launch/torchrun.py),
# attempt by attempt: the reference run without a fault, the run in which the
# grader kills a worker partway through the first attempt, and the two-node
# run. weights_in_sync, rank0_logs and cleanup judge the reference run's
# workers, as they judge graded ranks.

RESULT_TOLERANCE = 1e-4  # relative distance of the faulted run's final weights from the reference run's
TORCHRUN_CHANGE = "Fault tolerance"  # the change the torchrun checks check
JOB_WORDS = {"reference": "the run without a fault", "faulted": "the run with a fault", "two_node": "the two-node run"}
RESTART_HINT = (
    "Try it yourself: run your program with torchrun --nproc-per-node 2 --max-restarts 1, and kill one worker "
    "(kill -9 PID) in the third epoch. It must carry on from the snapshot."
)
SNAPSHOT_HINT = (
    "Save a dict such as {'model': model.module.state_dict(), 'optimizer': optimizer.state_dict(), "
    "'next_epoch': epoch + 1} from global rank 0 at the end of every epoch."
)


def _error_text(worker: RankRecords) -> str:
    error = worker.error
    if error is not None:
        name = "" if error["from_grader"] else f"{error['type']}: "
        frame = error["frames"][-1] if error["frames"] else None
        where = f" ({frame['file']}, line {frame['line']}: {frame['code']})" if frame else ""
        return f"rank {worker.rank} failed with {name}{error['message'][:300]}{where}"
    if worker.outcome is not None and worker.outcome.status == RankStatus.HUNG:
        return f"rank {worker.rank} was still running at the time limit"
    return f"rank {worker.rank} stopped before it finished"


def _unfinished(run: RunRecords, name: str, what: str) -> Outcome | None:
    """Why the job cannot tell `what`: it did not run, or did not finish. None when it finished."""
    job = run.torchrun.get(name)
    reference = run.torchrun.get("reference")
    if job is None:
        if reference is not None and reference.finished:
            why = "the time limit ran out first"
        else:
            why = "the run without a fault did not finish"
        return not_reached(f"Could not confirm {what}: {JOB_WORDS[name]} did not run, because {why}.")
    if job.finished:
        return None
    if name == "reference":  # its workers are the graded ranks: the report's headline names the error
        return _cannot_confirm(run, what)
    worker = next((w for w in job.last if w.outcome and w.outcome.status == RankStatus.FAILED), None)
    worker = worker or next(w for w in job.last if not w.finished)
    after = ", after the restart" if len(job.attempts) > 1 else ""
    return failed(
        f"Could not confirm {what}: in {JOB_WORDS[name]}{after}, {_error_text(worker)}.", RESTART_HINT, worker.rank
    )


def _place(worker: RankRecords) -> str:
    info = worker.first("torchrun_worker")
    if info is None:
        return f"rank {worker.rank}"
    return f"global rank {worker.rank} (local rank {info['local_rank']} on node {info['node']})"


def _passes(worker: RankRecords) -> int:
    """Whole passes over the training data: the epochs this worker finished."""
    return sum(e["finished"] for e in (*worker.all("sampler_epoch"), *worker.all("plain_sampler_epoch")))


def _saves_before_fault(job: TorchrunJobRecords) -> list[dict]:
    return job.attempts[0][0].all("snapshot_saved")


def _restarted(run: RunRecords, what: str) -> tuple[TorchrunJobRecords | None, Outcome | None]:
    """The faulted job, once it restarted and finished; else why `what` cannot be told."""
    problem = _unfinished(run, "reference", what) or _unfinished(run, "faulted", what)
    if problem is not None:
        return None, problem
    job = run.torchrun["faulted"]
    if len(job.attempts) > 1:
        return job, None
    if not any(w.first("fault_injected") for w in job.attempts[0]):
        return None, failed(
            f"Could not confirm {what}: the program finished before the grader's fault came (in the third epoch), "
            "so nothing was resumed.",
            "Train for at least three epochs, over a DataLoader with a DistributedSampler.",
        )
    return None, failed(
        f"Could not confirm {what}: torchrun did not restart the workers after the fault.",
        "This is a problem of the grading machine; tell your instructor.",
    )


def _loaded_snapshot(job: TorchrunJobRecords, worker: RankRecords) -> dict | None:
    """The snapshot of the first attempt that this restarted worker loaded before training."""
    saves = {e["model_state"]: e for e in _saves_before_fault(job) if e["model_state"]}
    return next(
        (
            saves[e["model_state"]]
            for e in worker.all("snapshot_loaded")
            if e["step"] == 0 and e["model_state"] in saves
        ),
        None,
    )


@check("torchrun_env", "Rank and world size from torchrun", 2, TORCHRUN_CHANGE)
def torchrun_env(run: RunRecords) -> Outcome:
    for job in run.torchrun.values():
        for worker in job.workers:
            spawned = worker.first("spawn_in_worker")
            if spawned is not None:
                return failed(
                    f"In {JOB_WORDS[job.name]}, the worker of rank {worker.rank} called mp.{spawned['function']}, "
                    "but torchrun had already started one process per rank.",
                    'Under torchrun, start with `if __name__ == "__main__": main()`: no mp.spawn.',
                    worker.rank,
                )
            refused = worker.first("init_refused")
            if refused is not None:
                return failed(f"In {JOB_WORDS[job.name]}: {refused['reason']}", refused["hint"], worker.rank)
    problem = _unfinished(run, "reference", "that the ranks came from torchrun")
    if problem is not None:
        return problem
    for worker in run.torchrun["reference"].last:
        if worker.first("process_group_ready") is None:
            return failed(
                f"Rank {worker.rank} never joined a process group.",
                "Call dist.init_process_group(backend) first thing in main: torchrun's environment gives it the "
                "rank and world size.",
                worker.rank,
            )
    return passed(
        f"In all {plural(len(run.torchrun), 'run')}, every worker joined the process group with the rank and world "
        "size that torchrun gave it, and none started processes of its own."
    )


@check("snapshot_rank0", "Only global rank 0 saves snapshots", 2, TORCHRUN_CHANGE)
def snapshot_rank0(run: RunRecords) -> Outcome:
    for name in ("reference", "faulted", "two_node"):
        job = run.torchrun.get(name)
        for worker in job.workers if job is not None else ():
            saved = worker.all("torch_save")
            if worker.rank == 0 or not saved:
                continue
            file = os.path.basename(saved[0]["path"] or "a file object")
            if name == "two_node":
                return failed(
                    f"In the two-node run, the worker of {_place(worker)} also saved {file}: each node had a writer.",
                    "A LOCAL_RANK == 0 guard lets one worker per node write. Guard the save with the global rank: "
                    "if int(os.environ['RANK']) == 0.",
                    worker.rank,
                )
            return failed(
                f"In {JOB_WORDS[name]}, rank {worker.rank} also saved {file}.",
                "Save snapshots from global rank 0 only: if int(os.environ['RANK']) == 0.",
                worker.rank,
            )
    for name in ("reference", "two_node"):
        problem = _unfinished(run, name, "who saved snapshots")
        if problem is not None:
            return problem
    if not run.torchrun["reference"].last[0].all("torch_save"):
        return failed("No snapshot was saved.", SNAPSHOT_HINT, 0)
    return passed("Only global rank 0 saved snapshots, on one node and on two.")


@check("snapshot_contents", "The snapshot holds what a restart needs", 2, TORCHRUN_CHANGE)
def snapshot_contents(run: RunRecords) -> Outcome:
    problem = _unfinished(run, "reference", "what the snapshot holds")
    if problem is not None:
        return problem
    saves = run.torchrun["reference"].last[0].all("snapshot_saved")
    if not saves:
        return failed("Rank 0 saved no snapshot.", SNAPSHOT_HINT, 0)
    last = saves[-1]
    file = os.path.basename(last["path"] or "the snapshot")
    if last["model_state"] is not None and last["load_problem"]:
        prefixed = "module." in last["load_problem"]
        return failed(
            f"The model state in {file} does not load into the plain model with strict=True: {last['load_problem']}",
            "Save model.module.state_dict(), the model inside the DDP wrapper."
            if prefixed
            else "Save the trained model's own state_dict().",
            0,
        )
    missing = [
        what
        for what, absent in (
            ("the model's state", last["model_state"] is None),
            ("the optimizer's state", last["optimizer_state"] is None),
            ("the epoch to resume from", last["epoch"] is None),
        )
        if absent
    ]
    if missing:
        return failed(f"The snapshot {file} does not hold {' or '.join(missing)}.", SNAPSHOT_HINT, 0)
    return passed(
        f"The snapshot {file} holds the model state (it loads into the plain model with strict=True), the "
        f"optimizer state and the epoch ({last['epoch']})."
    )


@check("resumed", "Resumed from the snapshot after a restart", 3, TORCHRUN_CHANGE)
def resumed(run: RunRecords) -> Outcome:
    job, problem = _restarted(run, "that the program resumed")
    if problem is not None:
        return problem
    if not any(e["model_state"] for e in _saves_before_fault(job)):
        return failed("No snapshot was saved before the fault, so there was nothing to resume from.", SNAPSHOT_HINT, 0)
    for worker in job.last:
        if _loaded_snapshot(job, worker) is None:
            return failed(
                f"After the restart, rank {worker.rank} did not load the snapshot: it started training from scratch.",
                "At start-up, if the snapshot file exists, load it (model, optimizer, and the epoch to start from) "
                "before training.",
                worker.rank,
            )
    epochs, again = _passes(run.torchrun["reference"].last[0]), _passes(job.last[0])
    if again >= epochs:
        return failed(
            f"After the restart the workers loaded the snapshot, but then trained all {epochs} epochs again.",
            "Start the epoch loop at the epoch from the snapshot: for epoch in range(start_epoch, EPOCHS).",
            0,
        )
    return passed(
        f"After the fault torchrun restarted the workers; each loaded the snapshot, and they trained {again} of the "
        f"{epochs} epochs."
    )


@check("resume_epoch", "Resumed at the right epoch", 2, TORCHRUN_CHANGE)
def resume_epoch(run: RunRecords) -> Outcome:
    job, problem = _restarted(run, "which epoch the program resumed at")
    if problem is not None:
        return problem
    saves = _saves_before_fault(job)
    done = saves[-1]["passes_finished"] if saves else 0
    epochs, after = _passes(run.torchrun["reference"].last[0]), _passes(job.last[0])
    if done + after == epochs:
        return passed(
            f"The last snapshot before the fault was written after {plural(done, 'epoch')}, and training resumed "
            f"with the next: {epochs} epochs in all, none repeated, none skipped."
        )
    first = job.last[0].first("sampler_epoch")
    resumed_at = f", but training resumed at epoch {first['epoch']}" if first else ""
    extra = done + after - epochs
    if extra > 0:
        return failed(
            f"After the restart, {plural(extra, 'epoch')} that had finished before the fault ran again: the last "
            f"snapshot was written after {plural(done, 'epoch')}{resumed_at}.",
            "Save the epoch to start from, epoch + 1, rather than the epoch that has just ended.",
            0,
        )
    return failed(
        f"After the restart, {plural(-extra, 'epoch')} were skipped: the last snapshot was written after "
        f"{plural(done, 'epoch')}{resumed_at}.",
        "Resume at the epoch the snapshot holds: save epoch + 1 at the end of each epoch, and start the loop there.",
        0,
    )


@check("optimizer_restored", "Optimizer state restored", 1, TORCHRUN_CHANGE)
def optimizer_restored(run: RunRecords) -> Outcome:
    job, problem = _restarted(run, "that the optimizer's state was restored")
    if problem is not None:
        return problem
    for worker in job.last:
        snapshot = _loaded_snapshot(job, worker)
        if snapshot is None:
            return failed(
                f"After the restart, rank {worker.rank} loaded no snapshot, so its optimizer started afresh.",
                "Load the snapshot at start-up, and the optimizer's state with it.",
                worker.rank,
            )
        if snapshot["optimizer_state"] is None:
            return failed(
                "The snapshot holds no optimizer state, so after the restart the optimizer started afresh (its "
                "momentum was lost).",
                "Save optimizer.state_dict() in the snapshot, and restore it with optimizer.load_state_dict(...).",
                0,
            )
        start = worker.first("optimizer_at_start")
        if start is None or start["state"] != snapshot["optimizer_state"]:
            return failed(
                f"After the restart, rank {worker.rank}'s optimizer did not start from the state in the snapshot.",
                "After building the optimizer, call optimizer.load_state_dict(snapshot['optimizer']).",
                worker.rank,
            )
    return passed("After the restart, every worker's optimizer started from the state saved in the snapshot.")


@check("same_result", "A fault does not change the result", 2, TORCHRUN_CHANGE)
def same_result(run: RunRecords) -> Outcome:
    job, problem = _restarted(run, "that the fault left the result unchanged")
    if problem is not None:
        return problem
    ends = [run.torchrun["reference"].last[0].first("training_end"), job.last[0].first("training_end")]
    if any(end["fingerprint"] is None for end in ends):
        return failed("No model was trained, so there are no final weights to compare.", RESTART_HINT, 0)
    distance = _spread([end["fingerprint"] for end in ends])
    if distance > RESULT_TOLERANCE:
        return failed(
            f"The run with a fault ended with other weights than the run without one (relative difference "
            f"{distance:.1e}, more than {RESULT_TOLERANCE:g}).",
            "Resume exactly: restore the model, the optimizer and the next epoch, and let the data order depend on "
            "the epoch alone (sampler.set_epoch(epoch)).",
            0,
        )
    return passed(
        f"The run with a fault ended with the same weights as the run without one (relative difference "
        f"{distance:.1e}, within {RESULT_TOLERANCE:g})."
    )

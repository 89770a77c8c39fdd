"""The checks of the data (change 2): a DistributedSampler splits the same data
set into distinct shares, and set_epoch reshuffles it every epoch.
"""

from __future__ import annotations

import math
from collections import Counter

from ...schema.events import parse
from ...wording import ranks_text
from ..analysis import training_sampler
from ..records import RankRecords, RunRecords
from ..verdict import Outcome, failed, passed, skipped
from .registry import by_id, cannot_confirm, check


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
                return cannot_confirm(run, "which data each rank read")
            plain = r.first("plain_sampler_epoch")
            if any(_over_the_training_data(s, plain) for s in r.all("sampler")):
                return _sampler_not_fed(r)
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


def _over_the_training_data(sampler: dict, plain: dict | None) -> bool:
    """Whether a DistributedSampler could have split the data the model trained on: not one over a
    data set of another size, such as a test set (a plain sampler's pass gives the trained-on size)."""
    length = (sampler["dataset"] or {}).get("length")
    return plain is None or plain["length"] is None or length is None or length == plain["length"]


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
    """Passes when what the model was fed in training came from a DataLoader with a `DistributedSampler` set up for
    its rank and the world size; the samples fed on the ranks are the ones the sampler handed out, disjoint
    apart from the sampler's padding, and together they cover the data set (below)."""
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
    """Passes when the data set behind the sampler is the same on every rank (length, and a fingerprint of its
    contents); fails without a sampler in training."""
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
    """Passes when a shuffling sampler got a new order every epoch (`set_epoch`); skipped when it does not shuffle
    or there is one epoch; fails without a sampler in training."""
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

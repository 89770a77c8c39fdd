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

from ..wording import plural, ranks_text
from .records import RankRecords, RunRecords
from .verdict import FAILED, SKIPPED, Outcome, Verdict, failed, passed, skipped

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".tar", ".bin")
SYNC_TOLERANCE = 1e-4  # relative spread of the parameter fingerprints


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    points: float
    change: str  # which of the five DDP changes it checks, as the notebooks' grade cells say
    judge: Callable[[RunRecords], Outcome]
    # Graded checks get a grade cell. gpu_device does not: on a CPU grading
    # machine it is always skipped (full points), so a cell would give every
    # notebook a point, and the total would depend on the machine.
    graded: bool = True


CHECKS: list[Check] = []


def check(check_id: str, title: str, points: float, change: str, graded: bool = True):
    def register(judge):
        CHECKS.append(Check(check_id, title, points, change, judge, graded))
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
        outcome = _not_runnable(run) or item.judge(run)
        if outcome.status == SKIPPED and not run.all_finished:
            # Fail closed: "does not apply" is only known of a run that finished.
            outcome = failed("Not checked: the run stopped early.", "Fix the error reported above, then check again.")
        earned = 0.0 if outcome.status == FAILED else item.points
        verdicts.append(
            Verdict(
                item.id, item.title, outcome.status, earned, item.points, outcome.message, outcome.hint, outcome.rank
            )
        )
    return verdicts


def _not_runnable(run: RunRecords) -> Outcome | None:
    if run.problem is not None:
        return failed("Not checked: the code could not run.", run.problem.hint)
    if not run.has_every_rank:
        return failed(
            f"Not checked: the run's records are incomplete (records of {len(run.ranks)} of {run.world_size} ranks).",
            "This is a problem of the grading machine; tell your instructor.",
        )
    return None


def _cannot_confirm(run: RunRecords, what: str) -> Outcome:
    """Fail closed: a run that stopped early proves nothing."""
    stuck = next(r for r in run.ranks if not r.finished)
    return failed(
        f"Could not confirm {what}: {run.why_not_reached(stuck.rank)}.",
        "Fix the error reported above, then check again.",
        stuck.rank,
    )


# --- (1) process group ------------------------------------------------------


@check("process_group", "Process group created", 2, "Change 1")
def process_group(run: RunRecords) -> Outcome:
    # A refused call is the cause; a rank stopped before its own call is only a consequence.
    for r in sorted(run.ranks, key=lambda r: r.first("init_refused") is None):
        calls = r.all("init_process_group")
        if not calls:
            return failed(
                f"Rank {r.rank} never called init_process_group ({run.why_not_reached(r.rank)}).",
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
    """The DistributedSampler this rank drew most indices from, and its epochs."""
    epochs_by_sampler: dict[int, list[dict]] = {}
    for epoch in r.all("sampler_epoch"):
        epochs_by_sampler.setdefault(epoch["sampler"], []).append(epoch)
    if not epochs_by_sampler:
        return None
    busiest = max(epochs_by_sampler, key=lambda s: sum(len(e["indices"]) for e in epochs_by_sampler[s]))
    config = next((s for s in r.all("sampler") if s["sampler"] == busiest), None)
    return (config, epochs_by_sampler[busiest]) if config else None


def _no_sampler_used(run: RunRecords) -> Outcome | None:
    for r in run.ranks:
        if training_sampler(r) is None:
            if not run.all_finished:
                return _cannot_confirm(run, "which data each rank read")
            if r.all("sampler"):
                return failed(
                    f"Rank {r.rank} created a DistributedSampler but its DataLoader never drew from it.",
                    "Pass it to the DataLoader: DataLoader(dataset, batch_size=..., sampler=sampler).",
                    r.rank,
                )
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
    size, drop_last = (
        samplers[0][0]["dataset"]["length"] if samplers[0][0]["dataset"] else None,
        samplers[0][0]["drop_last"],
    )
    if size is None:
        return failed("The data set's length could not be read.", "Use a data set with a __len__.")
    epochs = min(len(epochs) for _, epochs in samplers)
    for number in range(epochs):
        per_rank = [epochs[number]["indices"] for _, epochs in samplers]
        complete = all(epochs[number]["finished"] for _, epochs in samplers)
        problem = _partition_problem(run, size, drop_last or not complete, number + 1, per_rank)
        if problem:
            return problem
    share = len(samplers[0][1][0]["indices"])
    return passed(
        f"Each of the {run.world_size} ranks read its own share (about {share} of {size} samples) in each of "
        f"{epochs} epoch(s)."
    )


@check("same_dataset", "Every rank has the same data set", 1, "Change 2a")
def same_dataset(run: RunRecords) -> Outcome:
    if _no_sampler_used(run):
        return skipped("No DistributedSampler was used, so there is no shared data set to compare.")
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
    if _no_sampler_used(run):
        return skipped("No DistributedSampler was used.")
    config, epochs = training_sampler(run.ranks[0])
    if not config["shuffle"]:
        return skipped("The sampler does not shuffle, so there is no order to renew.")
    if len(epochs) < 2:
        return skipped("Training ran a single epoch.")
    seen = [e["epoch"] for e in epochs]
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
    return passed("The trained model is wrapped in DistributedDataParallel on every rank.")


def _spread(fingerprints: list[list[float]]) -> float:
    reference = fingerprints[0]
    scale = max(1e-12, math.sqrt(sum(x * x for x in reference)))
    return max(math.sqrt(sum((a - b) ** 2 for a, b in zip(fp, reference, strict=False))) for fp in fingerprints) / scale


def weight_spread(run: RunRecords) -> list[tuple[int, float]]:
    """(step, relative spread of the weights across ranks) at each step every rank recorded."""
    by_step = [{e["step"]: e["fingerprint"] for e in r.all("snapshot")} for r in run.ranks]
    common = sorted(set.intersection(*(set(s) for s in by_step))) if by_step else []
    return [(step, _spread([s[step] for s in by_step])) for step in common]


@check("weights_in_sync", "Weights equal on every rank", 2, "Change 3")
def weights_in_sync(run: RunRecords) -> Outcome:
    if not run.all_finished:
        return _cannot_confirm(run, "that the weights stayed equal")
    ends = [r.first("training_end") for r in run.ranks]
    if any(e["fingerprint"] is None for e in ends):
        return failed(
            "No model was trained or wrapped in DDP, so there are no weights to compare.",
            "Wrap the model in DDP and train it with an optimizer.",
        )
    for step, spread in weight_spread(run):
        if spread > SYNC_TOLERANCE:
            return failed(
                f"After step {step} the ranks' weights differ (relative difference {spread:.1e}): each rank "
                "trained its own copy.",
                "Wrap the model in DDP before training and call the wrapped model, so gradients are averaged "
                "over the ranks.",
            )
    final = _spread([e["fingerprint"] for e in ends])
    if final > SYNC_TOLERANCE:
        return failed(
            f"After training the ranks' weights differ (relative difference {final:.1e}).",
            "Let every rank take the same number of steps with the DDP model.",
        )
    return passed(f"After {plural(ends[0]['steps'], 'step')} the weights are the same on all {run.world_size} ranks.")


@check("training", "The model trained", 1, "Changes 1 to 5")
def training(run: RunRecords) -> Outcome:
    if not run.all_finished:
        return _cannot_confirm(run, "that the model trained")
    for r in run.ranks:
        end, first = r.first("training_end"), r.first("first_step")
        if not end["steps"] or first is None:
            return failed(
                f"Rank {r.rank} never called optimizer.step(), so the weights never changed.",
                "In each batch: optimizer.zero_grad(), loss.backward(), optimizer.step().",
                r.rank,
            )
        if _spread([first["fingerprint"], end["fingerprint"]]) < 1e-7:
            return failed(
                f"Rank {r.rank} took {end['steps']} optimizer steps but its weights did not change.",
                "Check that loss.backward() runs before optimizer.step() and the learning rate is not zero.",
                r.rank,
            )
    losses = [value for _, value in run.ranks[0].first("training_end")["losses"]]
    if len(losses) >= 4:
        window = max(1, len(losses) // 10)
        start, end = sum(losses[:window]) / window, sum(losses[-window:]) / window
        if not end < start:
            return failed(
                f"The loss did not fall: it went from about {start:.3g} to {end:.3g}.",
                "Check the learning rate and that the optimizer updates the model you call.",
                0,
            )
        return passed(f"The loss fell from about {start:.3g} to {end:.3g} over {len(losses)} steps.")
    return passed("The optimizer updated the weights.")


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
    return passed(f"Only rank 0 saved checkpoints ({len(written[0])} save(s) of {os.path.basename(written[0][-1])}).")


@check("checkpoint_loadable", "Checkpoint loads into the plain model", 1, "Change 4")
def checkpoint_loadable(run: RunRecords) -> Outcome:
    load = run.ranks[0].first("checkpoint_load")
    if load is None:
        if not run.all_finished:
            return _cannot_confirm(run, "that the checkpoint loads")
        return failed(
            "Rank 0 saved no checkpoint to load.", "Save model.module.state_dict() from rank 0 with torch.save.", 0
        )
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


def _printed_lines(r: RankRecords) -> int:
    """Lines the rank's Python code printed (warnings from C++ or on stderr don't count)."""
    done = r.first("rank_done")
    return done["printed_lines"] if done else 0


@check("rank0_logs", "Only rank 0 writes logs", 1, "Change 4")
def rank0_logs(run: RunRecords) -> Outcome:
    if not run.all_finished:
        return _cannot_confirm(run, "who wrote the logs")
    for r in run.ranks[1:]:
        logs = [e["path"] for e in r.all("file_written") if not e["path"].endswith(CHECKPOINT_SUFFIXES)]
        if logs:
            return failed(
                f"Rank {r.rank} wrote {os.path.basename(logs[0])}; every rank wrote its own copy of the log.",
                "Write log files from rank 0 only: `if rank == 0:`.",
                r.rank,
            )
    # Other ranks may say a word ("done"); printing about as much as rank 0
    # means the whole training log is repeated by every rank.
    lead = _printed_lines(run.ranks[0])
    for r in run.ranks[1:]:
        if lead >= 3 and _printed_lines(r) >= lead / 2:
            return failed(
                f"Rank {r.rank} printed {_printed_lines(r)} lines, about as many as rank 0's {lead}: "
                f"the training log appears {run.world_size} times.",
                "Print progress only on rank 0: `if rank == 0: print(...)`.",
                r.rank,
            )
    return passed("Logs came from rank 0 only.")


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


# --- GPU runs -----------------------------------------------------------------------


@check("gpu_device", "Each rank on its own GPU", 1, "Change 1", graded=False)
def gpu_device(run: RunRecords) -> Outcome:
    if run.backend != "nccl":
        return skipped("CPU run: there are no GPUs to place ranks on.")
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

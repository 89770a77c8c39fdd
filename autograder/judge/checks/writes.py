"""The checks of what the ranks write (change 4): checkpoints and logs come
from rank 0 only, and the checkpoint loads into the plain model.
"""

from __future__ import annotations

import os

from ...disk import CHECKPOINT_SUFFIXES, PROBLEMS, is_saved_by_torch
from ...wording import plural
from ..records import RankRecords, RunRecords
from ..verdict import Outcome, failed, passed
from .model import not_distributed, trained_alone
from .registry import cannot_confirm, check


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
    """Passes when only rank 0 saved checkpoints, and one of its files, opened by the grader with
    `torch.load(weights_only=True)`, holds a model state dict."""
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
        return cannot_confirm(run, "who saved checkpoints")
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
    """Passes when the saved model state, of a model trained with averaged gradients, loads with `strict=True` into
    the plain, unwrapped model (no `module.` prefix)."""
    load = run.ranks[0].first("checkpoint_load")
    if load is None:
        if not run.all_finished:
            return cannot_confirm(run, "that the checkpoint loads")
        return failed(
            "Rank 0 saved no checkpoint to load.", "Save model.module.state_dict() from rank 0 with torch.save.", 0
        )
    if trained_alone(run.ranks[0]):
        return not_distributed(run.ranks[0], "the checkpoint holds no model of distributed training")
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
    """Passes when rank 0 wrote a training log (a line with a number in it, or a log file), and no other rank wrote
    a log file or repeated a line (below)."""
    if not run.all_finished:
        return cannot_confirm(run, "who wrote the logs")
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

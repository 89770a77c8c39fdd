""" """

from __future__ import annotations

import os

from ...schema.run import RankStatus
from ...wording import plural
from ..analysis import relative_spread
from ..records import RankRecords, RunRecords, TorchrunJobRecords
from ..verdict import Outcome, failed, not_reached, passed
from .registry import cannot_confirm, check

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
        return cannot_confirm(run, what)
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
    """Passes when in every job, every worker joined the process group with the rank and world size torchrun gave
    it (a `rank=` other than `RANK`, such as `LOCAL_RANK` on node 1, is refused), and none called `mp.spawn`."""
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
    """Passes when only global rank 0 wrote snapshots, in all three jobs: a `LOCAL_RANK == 0` guard fails in the
    two-node job, where node 1's worker has `LOCAL_RANK` 0 and `RANK` 1."""
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
    """Passes when rank 0's last snapshot, loaded back from disk right after `torch.save`, holds a model state that
    loads with `strict=True` into the plain model, an optimizer `state_dict`, and an integer epoch."""
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
    """Passes when after the fault torchrun restarted the workers, each restarted worker loaded (before its first
    step) a snapshot written before the fault (matched by a hash of its model state, so a rename is fine), and
    it did not train every epoch again."""
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
    """Passes when epochs finished when the last snapshot before the fault was written, plus epochs trained after
    the restart, equal the epochs of the job without a fault: none repeated (saving `epoch` instead of `epoch +
    1`), none skipped."""
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
    """Passes when at its first step after the restart, every worker's optimizer state (momentum buffers, Adam's
    moments) equals the one in the snapshot it loaded."""
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
    """Passes when rank 0's final weights after the fault equal those of the job without a fault, within a relative
    1e-4."""
    job, problem = _restarted(run, "that the fault left the result unchanged")
    if problem is not None:
        return problem
    ends = [run.torchrun["reference"].last[0].first("training_end"), job.last[0].first("training_end")]
    if any(end["fingerprint"] is None for end in ends):
        return failed("No model was trained, so there are no final weights to compare.", RESTART_HINT, 0)
    distance = relative_spread([end["fingerprint"] for end in ends])
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

"""The checks of the rest of a run's life (change 5, the launcher, the
machine): the process group is destroyed, the student's own launcher starts
the ranks, and on GPUs each rank has its own device.
"""

from __future__ import annotations

from ...schema.run import MAX_OWN_LAUNCHER_RANKS, RankStatus
from ...wording import plural, ranks_text
from ..records import RunRecords
from ..verdict import Outcome, failed, passed
from .registry import cannot_confirm, check


@check("cleanup", "Process group destroyed", 1, "Change 5")
def cleanup(run: RunRecords) -> Outcome:
    """Passes when every rank destroyed its process group before returning."""
    if not run.all_finished:
        return cannot_confirm(run, "that the process group was destroyed")
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


LAUNCHER_HINT = (
    'At the bottom of the file: if __name__ == "__main__": world_size = ...; '
    "mp.spawn(main, args=(world_size,), nprocs=world_size)."
)


@check("launcher", "Your launcher starts the ranks", 1, "The launcher")
def launcher(run: RunRecords) -> Outcome:
    """Passes when run as `python FILE`, the file's `if __name__ == "__main__":` block started 1 to 8 ranks with
    `mp.spawn` or `start_processes`, every one joined a process group, and every one finished (below)."""
    # The launcher is run once the graded ranks have finished: it repeats their work.
    if not run.all_finished:
        return cannot_confirm(run, "that your launcher starts the ranks")
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
        return _cannot_start(asked)
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


def _cannot_start(asked: dict) -> Outcome:
    """The student's launcher asked for a number of ranks that cannot run."""
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


def _no_gpus(run: RunRecords) -> str | None:
    if run.backend == "nccl":
        return None
    return "Not counted on this machine: the run is on the CPU, with no GPUs to place ranks on."


@check(
    "gpu_device",
    "Each rank on its own GPU",
    1,
    "Change 1",
    graded=False,
    cannot_apply=_no_gpus,
)
def gpu_device(run: RunRecords) -> Outcome:
    """Passes when GPU runs only: each rank set its own device (`cuda:<rank>`) before creating the process group;
    on a CPU run it counts 0 of 0."""
    for r in run.ranks:
        init = r.first("init_process_group")
        if init is None:
            return cannot_confirm(run, "GPU placement")
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

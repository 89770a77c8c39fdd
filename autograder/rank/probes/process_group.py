"""Probe: init_process_group / destroy_process_group / torch.cuda.set_device.

The grader owns the rendezvous: whatever MASTER_ADDR/MASTER_PORT the student
sets, the group is built on a FileStore private to this grading run, so many
gradings can share one machine. Under torchrun the group is built as the
student asks: torchrun's agent owns the rendezvous, and every attempt of a
restarted job gets a fresh one. Arguments that cannot work under this run
(a wrong world size, nccl without GPUs) are refused at once with a message,
instead of hanging until a timeout.
"""

import datetime
import inspect
import os

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from .state import Probe, RankState, StudentError, wraps


def _backend_names(backend) -> set[str]:
    """'cpu:gloo,cuda:nccl' -> {'gloo', 'nccl'}."""
    if backend is None:
        return set()
    return {part.split(":")[-1].strip().lower() for part in str(backend).split(",")}


_WHERE_FROM = {
    "mp": (
        "Pass on the world_size that main(rank, world_size) receives instead of a fixed number.",
        "Pass on the rank that main(rank, world_size) receives.",
    ),
    "torchrun": (
        "Leave world_size out (torchrun's environment gives it), or pass int(os.environ['WORLD_SIZE']).",
        "Leave rank out (torchrun's environment gives it), or pass int(os.environ['RANK']): the global rank, "
        "not LOCAL_RANK.",
    ),
}


def _refuse_impossible(state: RankState, backend, world_size: int, rank: int) -> None:
    world_size_hint, rank_hint = _WHERE_FROM[state.launcher]
    if world_size not in (-1, None) and world_size != state.world_size:
        raise StudentError(
            f"init_process_group was called with world_size={world_size}, but the grader started "
            f"{state.world_size} ranks.",
            world_size_hint,
        )
    if rank not in (-1, None) and rank != state.rank:
        raise StudentError(
            f"init_process_group was called with rank={rank} in the process of rank {state.rank}.",
            rank_hint,
        )
    if "nccl" in _backend_names(backend) and state.backend != "nccl":
        raise StudentError(
            "init_process_group asked for the nccl backend, but this run has no GPU for each rank "
            "(it runs on the CPU with gloo).",
            "Pick the backend from the hardware: 'nccl' if torch.cuda.is_available() else 'gloo'.",
        )


def _attempt_store(asked: dict):
    """Under torchrun, env:// as torchrun gives it, with a key prefix per attempt.

    torch 2.14's agent keeps one store for all its restarts, and env:// adds
    no prefix of its own: a restarted worker could read a peer's address from
    the attempt before and fail with "Connection refused". None when the
    student chose another rendezvous, which is used as is."""
    if asked["store"] is not None or asked["init_method"] not in (None, "env://"):
        return None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    agent_store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        int(os.environ["WORLD_SIZE"]),
        is_master=False,
        timeout=asked["timeout"] or datetime.timedelta(minutes=30),
    )
    return dist.PrefixStore(f"/worker/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", agent_store)


class ProcessGroupProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.set_device_calls: list[str] = []
        self.original_destroy = dist.destroy_process_group  # to tidy up after a student who did not

    def install(self) -> None:
        probe, state = self, self.state
        original_init, original_destroy = dist.init_process_group, self.original_destroy
        signature = inspect.signature(original_init)

        @wraps(original_init)
        def init_process_group(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            probe.init(original_init, bound.arguments, args, kwargs)

        @wraps(original_destroy)
        def destroy_process_group(*args, **kwargs):
            group = args[0] if args else kwargs.get("group")
            state.record("destroy_process_group", default_group=group is None or group is c10d.GroupMember.WORLD)
            return original_destroy(*args, **kwargs)

        original_set_device = torch.cuda.set_device

        @wraps(original_set_device)
        def set_device(device):
            probe.set_device_calls.append(str(device))
            return original_set_device(device)

        for module in (dist, c10d):
            module.init_process_group = init_process_group
            module.destroy_process_group = destroy_process_group
        torch.cuda.set_device = set_device

    def init(self, original_init, asked: dict, args, kwargs) -> None:
        """The student's init_process_group: refused at once if it cannot work
        here, else built on the grader's rendezvous (torchrun's, under torchrun)."""
        state = self.state
        state.record("init_process_group", backend=asked["backend"], set_device_calls=list(self.set_device_calls))
        try:
            _refuse_impossible(state, asked["backend"], asked["world_size"], asked["rank"])
        except StudentError as refusal:
            state.record("init_refused", reason=refusal.message, hint=refusal.hint)
            raise
        store = (
            _attempt_store(asked)
            if state.launcher == "torchrun"
            else dist.FileStore(state.store_path, state.world_size)
        )
        if store is None:  # the student's own rendezvous, under torchrun
            original_init(*args, **kwargs)
        else:
            original_init(
                backend=asked["backend"],
                store=store,
                rank=state.rank,
                world_size=state.world_size,
                timeout=asked["timeout"] or datetime.timedelta(minutes=30),
                group_name=asked["group_name"],
                pg_options=asked["pg_options"],
                device_id=asked["device_id"],
            )
        state.record("process_group_ready", backend=dist.get_backend())

    def finish(self) -> None:
        still_up = dist.is_initialized()
        self.state.record("rank_end", process_group_still_initialized=still_up)
        if still_up:  # tidy up for the student so the rank can exit cleanly
            self.original_destroy()

"""Rank 0 crashes the interpreter itself."""
import ctypes

import torch.distributed as dist


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if rank == 0:
        ctypes.string_at(0)
    dist.barrier()
    dist.destroy_process_group()

"""Rank 1 raises while rank 0 goes on to a collective that needs rank 1."""
import torch
import torch.distributed as dist


def check_batch(rank):
    if rank == 1:
        raise ValueError("batch 7 has the wrong shape")


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    check_batch(rank)
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()

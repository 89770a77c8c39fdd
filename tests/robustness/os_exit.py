"""Rank 1 leaves with os._exit, which skips every cleanup."""
import os

import torch
import torch.distributed as dist


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()

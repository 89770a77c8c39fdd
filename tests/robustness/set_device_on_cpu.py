"""Calls torch.cuda.set_device without checking that there is a GPU."""
import torch
import torch.distributed as dist


def main(rank, world_size):
    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.destroy_process_group()

"""Asks for nccl, which needs a GPU per rank."""
import torch.distributed as dist


def main(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    dist.destroy_process_group()

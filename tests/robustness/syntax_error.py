"""A missing colon."""
import torch.distributed as dist


def main(rank, world_size)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)

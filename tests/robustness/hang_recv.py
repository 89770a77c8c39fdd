"""Both ranks wait in recv for a message the other never sends: a deadlock."""
import torch
import torch.distributed as dist


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    buffer = torch.zeros(1)
    dist.recv(buffer, src=(rank + 1) % world_size)
    dist.destroy_process_group()

"""Only rank 0 calls all_reduce, so it waits forever for the others."""
import torch
import torch.distributed as dist


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if rank == 0:
        dist.all_reduce(torch.ones(1))
    else:
        import time
        time.sleep(3600)
    dist.destroy_process_group()

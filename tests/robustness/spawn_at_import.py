"""Calls mp.spawn at module level, outside `if __name__ == "__main__":`."""
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.destroy_process_group()


mp.spawn(main, args=(2,), nprocs=2)

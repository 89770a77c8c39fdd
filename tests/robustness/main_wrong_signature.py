"""main takes only the rank."""
import torch.distributed as dist


def main(rank):
    dist.init_process_group("gloo", rank=rank, world_size=2)

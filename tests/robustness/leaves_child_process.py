"""Every rank starts a long-running child process and then hangs."""
import subprocess
import time

import torch.distributed as dist


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    subprocess.Popen(["sleep", "600"])
    time.sleep(600)

"""simple_linear_regression_serial.py converted to DistributedDataParallel.

The five changes are marked (1) to (5). Run it with:  python linear_regression_ddp.py
It starts one process per GPU, or two CPU processes (gloo) when there is no GPU.
"""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

N_SAMPLES = 1000
BATCH_SIZE = 32
EPOCHS = 20
LEARNING_RATE = 0.1
SAVE_EVERY = 5
CHECKPOINT = "linear_regression.pt"


def make_dataset(n_samples=N_SAMPLES, seed=0):
    """The seed makes every rank build exactly the same data set."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n_samples, 1, generator=generator) * 2 - 1
    noise = 0.1 * torch.randn(n_samples, 1, generator=generator)
    return TensorDataset(x, 2 * x + 1 + noise)


def setup(rank, world_size):
    """(1) Join the process group. The device is chosen before the group is made."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)


def train_one_epoch(model, loader, loss_fn, optimizer, device):
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over all ranks here
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def save_checkpoint(model, optimizer, epoch, loss):
    torch.save(
        {
            "epoch": epoch,
            "model_state_dict": model.module.state_dict(),  # no "module." prefix
            "optimizer_state_dict": optimizer.state_dict(),
            "loss": loss,
        },
        CHECKPOINT,
    )


def main(rank, world_size):
    setup(rank, world_size)
    try:
        device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
        dataset = make_dataset()
        # (2) Each rank reads its own share of the data.
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
        # (3) DDP keeps the copies of the model equal by averaging gradients.
        model = nn.Linear(1, 1).to(device)
        model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)
        loss_fn = nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

        for epoch in range(EPOCHS):
            sampler.set_epoch(epoch)  # a new shuffle every epoch
            loss = train_one_epoch(model, loader, loss_fn, optimizer, device)
            # (4) Only rank 0 prints and saves.
            if rank == 0 and (epoch + 1) % SAVE_EVERY == 0:
                print(f"epoch {epoch + 1:3d}  loss {loss:.4f}")
                save_checkpoint(model, optimizer, epoch, loss)

        if rank == 0:
            weight, bias = model.module.weight.item(), model.module.bias.item()
            print(f"learned y = {weight:.3f} x + {bias:.3f}   (true line: y = 2x + 1)")
    finally:
        dist.destroy_process_group()  # (5) Leave the group, even after an error.


def free_port():
    """A port nobody is using, so two runs on one machine do not collide."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


if __name__ == "__main__":
    world_size = torch.cuda.device_count() or 2  # two CPU processes without a GPU
    os.environ["MASTER_PORT"] = free_port()
    mp.spawn(main, args=(world_size,), nprocs=world_size)

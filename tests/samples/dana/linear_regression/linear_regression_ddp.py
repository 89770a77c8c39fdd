"""simple_linear_regression_serial.py, trained with DistributedDataParallel (DDP).

Run it with:  python linear_regression_ddp.py
It starts one process (rank) per GPU, or two CPU processes with the gloo backend on a
machine without a GPU. The five DDP changes are marked "Change 1" to "Change 5".
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
BATCH_SIZE = 32  # per rank: one optimizer step now uses BATCH_SIZE x world_size samples
EPOCHS = 20
LEARNING_RATE = 0.1
SAVE_EVERY = 5
CHECKPOINT = "linear_regression.pt"


def make_dataset(n_samples=N_SAMPLES, seed=0):
    """Unchanged. The fixed seed gives every rank exactly the same data set."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n_samples, 1, generator=generator) * 2 - 1
    noise = 0.1 * torch.randn(n_samples, 1, generator=generator)
    return TensorDataset(x, 2 * x + 1 + noise)


def train_one_epoch(model, loader, loss_fn, optimizer, device):
    """Unchanged. With a DDP model, loss.backward() also averages the gradients over the ranks."""
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def save_checkpoint(model, optimizer, epoch, loss):
    """Unchanged: saves the state dict of the model it is given."""
    torch.save(
        {
            "epoch": epoch,
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "loss": loss,
        },
        CHECKPOINT,
    )


def setup(rank, world_size):
    """Change 1: join the process group (MASTER_ADDR and MASTER_PORT come from the launcher)."""
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)  # this rank's GPU, chosen before the group is created
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)


def log_and_save(rank, model, optimizer, epoch, loss):
    """Change 4: every rank calls this after every epoch; only rank 0 prints and saves.

    Serial version, in the epoch loop:
        if (epoch + 1) % SAVE_EVERY == 0:
            print(f"epoch {epoch + 1:3d}  loss {loss:.4f}")
            save_checkpoint(model, optimizer, epoch, loss)
    and after the loop: print the learned line.
    """
    if rank != 0:
        return
    if (epoch + 1) % SAVE_EVERY == 0:
        print(f"epoch {epoch + 1:3d}  loss {loss:.4f}")
        save_checkpoint(model.module, optimizer, epoch, loss)  # the plain model: no "module." in the keys
    if epoch + 1 == EPOCHS:
        weight, bias = model.module.weight.item(), model.module.bias.item()
        print(f"learned y = {weight:.3f} x + {bias:.3f}   (true line: y = 2x + 1)")


def main(rank, world_size):
    """What every rank runs. The launcher below (and the grader) calls main(rank, world_size)."""
    setup(rank, world_size)
    try:
        device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
        dataset = make_dataset()
        # Change 2a: each rank reads its own share of the data.
        # Serial version: loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)

        model = nn.Linear(1, 1).to(device)
        # Change 3: wrap the model in DistributedDataParallel.
        model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)
        loss_fn = nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

        for epoch in range(EPOCHS):
            # Change 2b: a new shuffle in every epoch.
            pass
            loss = train_one_epoch(model, loader, loss_fn, optimizer, device)
            log_and_save(rank, model, optimizer, epoch, loss)
    finally:
        # Change 5: leave the process group, also when training raised an error.
        dist.destroy_process_group()


def free_port():
    """Any port that is free right now (port 0 asks the operating system to pick one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


if __name__ == "__main__":
    # One rank per GPU. device_count() is 0 on a machine without a GPU: use 2 CPU ranks there.
    world_size = torch.cuda.device_count() or 2
    # Chosen once, here in the parent; every rank inherits the same address and port.
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = free_port()
    # As torchrun does: one CPU thread per rank, so that the ranks do not fight over the cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(main, args=(world_size,), nprocs=world_size)

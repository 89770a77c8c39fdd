"""The MNIST classifier trained with DistributedDataParallel.

The five changes are marked (1) to (5). Run it with:  python mnist_ddp.py
It starts one process per GPU, or two CPU processes (gloo) when there is no GPU.
"""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

BATCH_SIZE = 32
EPOCHS = 3
CHECKPOINT = "mnist_checkpoint.pt"


class Net(nn.Module):
    """A small fully connected classifier: 28x28 pixels in, 10 digit scores out."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.layers = nn.Sequential(
            nn.Linear(28 * 28, 128),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(128, 10),
        )

    def forward(self, x):
        return self.layers(self.flatten(x))


def setup(rank, world_size):
    """(1) Join the process group. The device is chosen before the group is made."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)


def prepare_data(rank, world_size, batch_size=BATCH_SIZE):
    """(2) Every rank loads the same MNIST; the sampler gives each its own share."""
    trainset = torchvision.datasets.MNIST(
        root="data", train=True, download=True, transform=torchvision.transforms.ToTensor()
    )
    sampler = DistributedSampler(trainset, num_replicas=world_size, rank=rank, shuffle=True)
    return DataLoader(trainset, batch_size=batch_size, sampler=sampler)


def train_one_epoch(rank, device, loader, model, loss_fn, optimizer):
    for batch, (images, labels) in enumerate(loader):
        images, labels = images.to(device), labels.to(device)
        loss = loss_fn(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and batch % 10 == 0:  # (4) one log, from rank 0
            print(f"  batch {batch:4d}  loss {loss.item():.4f}")


def main(rank, world_size):
    setup(rank, world_size)
    try:
        device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
        loader = prepare_data(rank, world_size)
        # (3) Wrap the model so that gradients are averaged across ranks.
        model = DDP(Net().to(device), device_ids=[rank] if device.type == "cuda" else None)
        loss_fn = nn.CrossEntropyLoss()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

        for epoch in range(EPOCHS):
            loader.sampler.set_epoch(epoch)  # a new shuffle every epoch
            if rank == 0:
                print(f"epoch {epoch + 1}")
            train_one_epoch(rank, device, loader, model, loss_fn, optimizer)
            if rank == 0:  # (4) one checkpoint, from rank 0
                torch.save({"epoch": epoch, "model_state_dict": model.module.state_dict()}, CHECKPOINT)
    finally:
        dist.destroy_process_group()  # (5)


def free_port():
    """A port nobody is using, so two runs on one machine do not collide."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


if __name__ == "__main__":
    world_size = torch.cuda.device_count() or 2
    os.environ["MASTER_PORT"] = free_port()
    mp.spawn(main, args=(world_size,), nprocs=world_size)

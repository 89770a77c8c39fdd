"""The MNIST classifier of this notebook, trained with DistributedDataParallel (DDP).

Run it with:  python mnist_ddp.py
It starts one process (rank) per GPU, or two CPU processes with the gloo backend on a
machine without a GPU. The five DDP changes are marked "Change 1" to "Change 5".
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
from torchvision.transforms import ToTensor

BATCH_SIZE = 32  # per rank: one optimizer step now uses BATCH_SIZE x world_size images
EPOCHS = 3
LEARNING_RATE = 1e-3
CHECKPOINT = "mnist_checkpoint.pt"


class Net(nn.Module):
    """Unchanged: 28 x 28 pixels in, one score per digit out."""

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


def load_mnist():
    """Unchanged: every rank loads the same training set from data/."""
    return torchvision.datasets.MNIST(root="data", train=True, download=True, transform=ToTensor())


def train_one_epoch(model, loader, loss_fn, optimizer, device):
    """Unchanged: one pass over this rank's batches; returns the mean loss and the accuracy."""
    model.train()
    total_loss, correct, seen = 0.0, 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        scores = model(images)
        loss = loss_fn(scores, labels)
        optimizer.zero_grad()
        loss.backward()  # with DDP: the gradients are averaged over the ranks here
        optimizer.step()
        total_loss += loss.item() * len(labels)
        correct += (scores.argmax(dim=1) == labels).sum().item()
        seen += len(labels)
    return total_loss / seen, correct / seen


def setup(rank, world_size):
    """Change 1: join the process group (MASTER_ADDR and MASTER_PORT come from the launcher)."""
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)  # this rank's GPU, chosen before the group is created
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)


def log_and_save(rank, model, epoch, loss, accuracy):
    """Change 4: every rank calls this after every epoch; only rank 0 prints and saves.

    Serial version:
        print(f"epoch {epoch + 1}  loss {loss:.4f}  accuracy {accuracy:.1%}")
        torch.save({"epoch": epoch, "model_state_dict": model.state_dict()}, CHECKPOINT)
    """
    print(f"epoch {epoch + 1}  loss {loss:.4f}  accuracy {accuracy:.1%}")
    torch.save({"epoch": epoch, "model_state_dict": model.module.state_dict()}, CHECKPOINT)


def main(rank, world_size):
    """What every rank runs. The launcher below (and the grader) calls main(rank, world_size)."""
    setup(rank, world_size)
    try:
        device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
        trainset = load_mnist()
        # Change 2a: each rank reads its own share of the images.
        # Serial version: loader = DataLoader(trainset, batch_size=BATCH_SIZE, shuffle=True)
        sampler = DistributedSampler(trainset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(trainset, batch_size=BATCH_SIZE, sampler=sampler)

        model = Net().to(device)
        # Change 3: wrap the model in DistributedDataParallel.
        model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)
        loss_fn = nn.CrossEntropyLoss()
        optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

        for epoch in range(EPOCHS):
            # Change 2b: a new shuffle in every epoch.
            sampler.set_epoch(epoch)
            loss, accuracy = train_one_epoch(model, loader, loss_fn, optimizer, device)
            log_and_save(rank, model, epoch, loss, accuracy)
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

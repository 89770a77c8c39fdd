"""The MNIST classifier trained with DistributedDataParallel.

The five changes are marked (1) to (5); after training, every rank evaluates its
share of the test set and main returns the accuracy on all of it. Run it with:
python mnist_ddp.py. It starts one process per GPU, or two CPU processes (gloo)
when there is no GPU.
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


def evaluate(rank, world_size, device, model):
    """The loss and accuracy on the whole test set, the work shared out: every rank
    evaluates its own share, and the counts are added up over the ranks."""
    testset = torchvision.datasets.MNIST(
        root="data", train=False, download=True, transform=torchvision.transforms.ToTensor()
    )
    sampler = DistributedSampler(testset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(testset, batch_size=100, sampler=sampler)
    # The sampler pads the index list to a multiple of world_size: rank r's k-th index sits at
    # position r + k * world_size of it, and positions past the end of the test set are repeats.
    position = rank
    totals = torch.zeros(3, device=device)  # summed loss, right answers, samples
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            positions = position + world_size * torch.arange(len(labels))
            position += world_size * len(labels)
            real = (positions < len(testset)).to(device)
            scores, labels = model(images.to(device))[real], labels.to(device)[real]
            loss = nn.functional.cross_entropy(scores, labels, reduction="sum")
            right = (scores.argmax(dim=1) == labels).sum()
            totals += torch.stack([loss, right.float(), torch.tensor(float(len(labels)), device=device)])
    model.train()
    dist.all_reduce(totals)  # every rank now holds the totals of all ranks
    loss, correct, samples = totals.tolist()
    return loss / samples, correct / samples


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
        test_loss, test_accuracy = evaluate(rank, world_size, device, model)
        if rank == 0:
            print(f"test loss {test_loss:.4f}  accuracy {test_accuracy:.1%}")
        return test_accuracy
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

"""Fit a straight line with PyTorch, on one device.

The data are 1,000 noisy points around y = 2x + 1. A one-feature linear
model learns the slope and the intercept in a few seconds on a CPU, and the
script saves a checkpoint every few epochs. This is the starting point of the
linear regression assignment: you will turn it into a DistributedDataParallel
(DDP) program.

Run it with:  python simple_linear_regression_serial.py
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

N_SAMPLES = 1000
BATCH_SIZE = 32
EPOCHS = 20
LEARNING_RATE = 0.1
SAVE_EVERY = 5
CHECKPOINT = "linear_regression.pt"


def make_dataset(n_samples=N_SAMPLES, seed=0):
    """Noisy points on y = 2x + 1. The fixed seed makes the data the same on every run."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n_samples, 1, generator=generator) * 2 - 1
    noise = 0.1 * torch.randn(n_samples, 1, generator=generator)
    return TensorDataset(x, 2 * x + 1 + noise)


def train_one_epoch(model, loader, loss_fn, optimizer, device):
    """One pass over the data; returns the mean loss of the epoch."""
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
    torch.save(
        {
            "epoch": epoch,
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "loss": loss,
        },
        CHECKPOINT,
    )


def main(device):
    loader = DataLoader(make_dataset(), batch_size=BATCH_SIZE, shuffle=True)
    model = nn.Linear(1, 1).to(device)
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    for epoch in range(EPOCHS):
        loss = train_one_epoch(model, loader, loss_fn, optimizer, device)
        if (epoch + 1) % SAVE_EVERY == 0:
            print(f"epoch {epoch + 1:3d}  loss {loss:.4f}")
            save_checkpoint(model, optimizer, epoch, loss)

    weight, bias = model.weight.item(), model.bias.item()
    print(f"learned y = {weight:.3f} x + {bias:.3f}   (true line: y = 2x + 1)")


if __name__ == "__main__":
    main(torch.device("cuda" if torch.cuda.is_available() else "cpu"))

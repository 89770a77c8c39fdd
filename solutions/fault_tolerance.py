"""DDP training that survives a lost process: launched by torchrun, it keeps a
snapshot of its progress and, when torchrun restarts it, carries on from there.

    torchrun --nproc-per-node 2 --max-restarts 1 fault_tolerance.py

torchrun starts one process per rank and tells each who it is through its
environment, so there is no mp.spawn here. When a process dies, torchrun
stops the others and starts them all again (up to --max-restarts times); the
new processes find the snapshot and resume from the epoch after the last one
that finished.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SNAPSHOT_PATH = "snapshot.pt"
EPOCHS = 4
BATCH_SIZE = 16


def make_dataset() -> TensorDataset:
    """A fixed regression problem: the same 256 samples in every process."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=generator)
    true_weights = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)
    y = x @ true_weights + 0.1 * torch.randn(256, 1, generator=generator)
    return TensorDataset(x, y)


def save_snapshot(model: DDP, optimizer: torch.optim.Optimizer, next_epoch: int) -> None:
    """Everything a restart needs, written to a temporary file and then renamed:
    a process killed while writing leaves the previous snapshot whole."""
    snapshot = {
        "model": model.module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "next_epoch": next_epoch,
    }
    temporary = SNAPSHOT_PATH + ".tmp"
    torch.save(snapshot, temporary)
    os.replace(temporary, SNAPSHOT_PATH)


def load_snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore model and optimizer from the snapshot; the epoch to start from."""
    if not os.path.exists(SNAPSHOT_PATH):
        return 0
    snapshot = torch.load(SNAPSHOT_PATH, map_location="cpu")
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["next_epoch"]


def main() -> None:
    # torchrun has set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    rank = int(os.environ["RANK"])  # global: unique across every node
    local_rank = int(os.environ["LOCAL_RANK"])  # this node's GPU index
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        # Every rank loads the same snapshot before DDP copies rank 0's weights to all.
        first_epoch = load_snapshot(model, optimizer)
        ddp_model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        dataset = make_dataset()
        sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
        if rank == 0 and first_epoch:
            print(f"resuming at epoch {first_epoch}")
        for epoch in range(first_epoch, EPOCHS):
            sampler.set_epoch(epoch)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(ddp_model(x), y)
                loss.backward()
                optimizer.step()
            if rank == 0:  # global rank 0: one writer, however many nodes
                save_snapshot(ddp_model, optimizer, epoch + 1)
                print(f"epoch {epoch}  loss {loss.item():.4f}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

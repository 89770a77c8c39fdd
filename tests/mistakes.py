"""The catalogue of submissions: each one is a reference solution with one
change (a classic student mistake, or a correct variant), written out on demand.

An entry names the submission, the reference it starts from, what is wrong
with it in plain words (the generated file's docstring), and its edits as
(old, new) pairs. Each `old` must occur exactly once when it is applied, so a
change to the solutions breaks an entry loudly instead of silently.

    path = write_submission("linear_regression/no_sampler", tmp_path)
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LR = Path("solutions/linear_regression_ddp.py")
MNIST = Path("solutions/mnist_ddp.py")
FT = Path("solutions/fault_tolerance.py")
SERIAL = Path("source/linear_regression/simple_linear_regression_serial.py")

Edit = tuple[str, str]


@dataclass(frozen=True)
class Submission:
    name: str  # "<exercise or group>/<file stem>"
    reference: Path  # relative to the repository root
    what: str  # the docstring's first paragraph, line breaks included
    edits: tuple[Edit, ...]

    def source(self) -> str:
        text = (ROOT / self.reference).read_text()
        for old, new in ((DOCSTRING[self.reference], self.docstring()), *self.edits):
            found = text.count(old)
            assert found == 1, f"{self.name}: {old!r} occurs {found} times in the edited {self.reference}, not once"
            text = text.replace(old, new)
        return text

    def docstring(self) -> str:
        return f'"""{self.what}\n\nOtherwise it is the reference solution, {self.reference}.\n"""\n'


def write_submission(name: str, folder: Path) -> Path:
    """Write the submission `name` to folder/<stem>.py and return that path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.rsplit('/', 1)[-1]}.py"
    path.write_text(SUBMISSIONS[name].source())
    return path


def _docstring(reference: Path) -> str:
    text = (ROOT / reference).read_text()
    assert text.startswith('"""'), reference
    return text[: text.index('"""\n', 3) + 4]


def _out_of_try(reference: Path) -> Edit:
    """Drop main's try: and its finally: block, and unindent what was inside."""
    text = (ROOT / reference).read_text()
    start, end = text.index(TRY), text.index(FINALLY)
    return text[start : end + len(FINALLY)], textwrap.indent(textwrap.dedent(text[start + len(TRY) : end]), "    ")


DOCSTRING = {reference: _docstring(reference) for reference in (LR, MNIST, FT, SERIAL)}

# Lines of solutions/linear_regression_ddp.py that several entries edit.
TRY = "    try:\n"
FINALLY = "    finally:\n        dist.destroy_process_group()  # (5) Leave the group, even after an error.\n"
SAMPLER = (
    "        # (2) Each rank reads its own share of the data.\n"
    "        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)\n"
    "        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)\n"
)
SHUFFLED_LOADER = "        loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)\n"
DDP_COMMENT = "        # (3) DDP keeps the copies of the model equal by averaging gradients.\n"
DDP_WRAP = '        model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)\n'
SET_EPOCH = "            sampler.set_epoch(epoch)  # a new shuffle every epoch\n"
SAVE = "                save_checkpoint(model, optimizer, epoch, loss)\n"
# Lines of solutions/fault_tolerance.py.
FT_GUARD = "            if rank == 0:  # global rank 0: one writer, however many nodes\n"
FT_SAVE_CALL = "                save_snapshot(ddp_model, optimizer, epoch + 1)\n"
LOG_EVERY_5 = (
    "            if rank == 0 and (epoch + 1) % SAVE_EVERY == 0:\n"
    '                print(f"epoch {epoch + 1:3d}  loss {loss:.4f}")\n'
)

MAIN_STARTS = "def main(rank, world_size):\n    setup(rank, world_size)\n"
LR_LAUNCH = "    world_size = torch.cuda.device_count() or 2  # two CPU processes without a GPU\n"
EPOCH_LOSS = "            loss = train_one_epoch(model, loader, loss_fn, optimizer, device)\n"

BATCH_NUMBERS = ("    for x, y in loader:\n", "    for batch, (x, y) in enumerate(loader):\n")

NO_SET_EPOCH = (SET_EPOCH, "")
NO_DDP = (DDP_WRAP, "")
STATE_OF_WRAPPER = ('model.module.state_dict(),  # no "module." prefix', "model.state_dict(),")
WEIGHTS_OF_PLAIN_MODEL = (
    "model.module.weight.item(), model.module.bias.item()",
    "model.weight.item(), model.bias.item()",
)
PLAIN_STATE = ('model.module.state_dict(),  # no "module." prefix', "model.state_dict(),")
LR_BATCH_TO_DEVICE = "        x, y = x.to(device), y.to(device)\n"
LR_TRAINING_STEP = (
    "        loss = loss_fn(model(x), y)\n"
    "        optimizer.zero_grad()\n"
    "        loss.backward()  # DDP averages the gradients over all ranks here\n"
    "        optimizer.step()\n"
)
BACKWARD = "        loss.backward()  # DDP averages the gradients over all ranks here\n"
ALL_REDUCE = "        for p in model.parameters():\n            dist.all_reduce(p.grad)\n"
CLAIM_CLEAN_EXIT = """def claim_a_clean_exit():
    import json

    if os.environ["RANK"] != "1":
        return
    done = json.dumps({"kind": "rank_done", "failed": False}) + "\\n"
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):  # the stream the probes send the records on, among others
            try:
                os.write(int(fd), done.encode())
            except OSError:
                pass
    os._exit(3)


"""
# Made-up records: every event a finished rank writes, with fields of the wrong type.
FORGE = """def forge():
    import json
    forged = [
        {"kind": "process_group_ready", "backend": 7},
        {"kind": "rank_end", "process_group_still_initialized": "no"},
        {"kind": "ddp_created", "devices": "cpu"},
        {"kind": "ddp_forward_calls", "calls": [1, 2]},
        {"kind": "first_step", "parameters": None, "fingerprint": "0"},
        {"kind": "training_end", "steps": "many", "losses": [[1]], "fingerprint": {"a": 1}},
        {"kind": "torch_save", "path": ["linear_regression.pt"]},
        {"kind": "model_inputs", "epochs": [{"sampler": 0}], "rows": -1},
        {"kind": "rank_done", "failed": False, "output": None},
    ]
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):  # the stream the probes send the records on
            os.write(int(fd), "".join(json.dumps(event) + "\\n" for event in forged).encode())
    os._exit(0)


"""
EVERY_RANK_SAVES = (
    LOG_EVERY_5,
    "            if (epoch + 1) % SAVE_EVERY == 0:\n"
    "                if rank == 0:\n"
    '                    print(f"epoch {epoch + 1:3d}  loss {loss:.4f}")\n',
)


def entry(name: str, reference: Path, what: str, *edits: Edit) -> Submission:
    return Submission(name, reference, what, edits)


CATALOGUE = [
    # Correct variants.
    entry(
        "linear_regression/seed_per_rank",
        LR,
        "Correct: each rank seeds torch with its rank before building the model, so the\n"
        "initial weights differ, but DDP broadcasts rank 0's weights when it wraps the\n"
        "model. The data set has its own generator, so it is the same on every rank.",
        (
            "        model = nn.Linear(1, 1).to(device)\n",
            "        torch.manual_seed(rank)  # different initial weights; DDP copies rank 0's\n"
            "        model = nn.Linear(1, 1).to(device)\n",
        ),
    ),
    # Correct variants that change the batch between the DataLoader and the model.
    entry(
        "linear_regression/normalised_batch",
        LR,
        "Correct: each batch is normalised in the training loop, after the DataLoader\n"
        "and before the model, so the model never sees the rows the DataLoader yielded.",
        (LR_BATCH_TO_DEVICE, LR_BATCH_TO_DEVICE + "        x = (x - 0.25) / 2.0\n"),
    ),
    entry(
        "linear_regression/noise_augmented",
        LR,
        "Correct: a little noise is added to every batch in the training loop, the way\n"
        "data is augmented, once with randn_like and once with randn of its shape.",
        (
            LR_BATCH_TO_DEVICE,
            LR_BATCH_TO_DEVICE + "        x = x + 0.01 * torch.randn_like(x)\n"
            "        x = x + 0.01 * torch.randn(x.shape, device=x.device)\n",
        ),
    ),
    entry(
        "linear_regression/cast_and_reshaped",
        LR,
        "Correct: the batch is cast to float64 and back, flattened, viewed as a column\n"
        "and scaled in place before the model sees it.",
        (
            LR_BATCH_TO_DEVICE,
            LR_BATCH_TO_DEVICE + "        x = x.double().float().flatten(1).view(-1, 1)\n"
            "        x.mul_(0.5)\n"
            "        x[x < -0.4] = -0.4\n",
        ),
    ),
    entry(
        "linear_regression/workers_out_of_order",
        LR,
        "Correct: two DataLoader worker processes hand back batches in whatever order\n"
        "they finish (in_order=False), and each batch is normalised before the model.",
        (
            "loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)",
            "loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler, num_workers=2, in_order=False)",
        ),
        (LR_BATCH_TO_DEVICE, LR_BATCH_TO_DEVICE + "        x = (x - 0.25) / 2.0\n"),
    ),
    entry(
        "linear_regression/no_sync_accumulation",
        LR,
        "Correct: gradients are accumulated over two batches (the first under\n"
        "no_sync, so DDP averages once), each loss divided by the two batches.",
        (
            LR_TRAINING_STEP,
            "        last = index % 2 == 1 or index == len(loader) - 1\n"
            "        with contextlib.nullcontext() if last else model.no_sync():\n"
            "            loss = loss_fn(model(x), y)\n"
            "            (loss / 2).backward()\n"
            "        if last:\n"
            "            optimizer.step()\n"
            "            optimizer.zero_grad()\n",
        ),
        ("    for x, y in loader:\n", "    for index, (x, y) in enumerate(loader):\n"),
        ("import os\n", "import contextlib\nimport os\n"),
    ),
    entry(
        "mnist/normalised_batch",
        MNIST,
        "Correct: the images are normalised with MNIST's mean and spread in the training\n"
        "loop, after the DataLoader and before the model.",
        (
            "        images, labels = images.to(device), labels.to(device)\n",
            "        images, labels = images.to(device), labels.to(device)\n"
            "        images = (images - 0.1307) / 0.3081\n",
        ),
    ),
    entry(
        "mnist/normalised_in_forward",
        MNIST,
        "Correct: the model's forward scales its input before the layers.",
        ("        return self.layers(self.flatten(x))\n", "        return self.layers(self.flatten((x - 0.5) * 2))\n"),
    ),
    entry(
        "linear_regression/no_shuffle",
        LR,
        "Correct: the DistributedSampler does not shuffle (shuffle=False), so there is\n"
        "no order to renew and set_epoch is not needed.",
        ("rank=rank, shuffle=True)", "rank=rank, shuffle=False)"),
        NO_SET_EPOCH,
    ),
    entry(
        "linear_regression/sampler_default_args",
        LR,
        "Correct: DistributedSampler(dataset) without num_replicas and rank, which it\n"
        "then reads from the process group (shuffle=True is its default).",
        (
            "DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)",
            "DistributedSampler(dataset)",
        ),
    ),
    # (1) process group
    entry(
        "linear_regression/hardcoded_world_size",
        LR,
        "Mistake: the process group is created with world_size=2 hard-coded instead of\n"
        "the world_size that main receives.",
        ('"gloo", rank=rank, world_size=world_size', '"gloo", rank=rank, world_size=2'),
    ),
    entry(
        "linear_regression/nccl_on_cpu",
        LR,
        "Mistake: the process group always uses the nccl backend (copied from a GPU\n"
        "tutorial), which cannot work on a machine without a GPU per rank.",
        (
            "    if torch.cuda.is_available():\n"
            "        torch.cuda.set_device(rank)\n"
            '        dist.init_process_group("nccl", rank=rank, world_size=world_size)\n'
            "    else:\n"
            '        dist.init_process_group("gloo", rank=rank, world_size=world_size)\n',
            '    dist.init_process_group("nccl", rank=rank, world_size=world_size)\n',
        ),
    ),
    # (2) the data
    entry(
        "linear_regression/no_sampler",
        LR,
        "Mistake: no DistributedSampler. The DataLoader shuffles the whole data set\n"
        "(shuffle=True) on every rank, so each rank trains on all 1000 samples and the\n"
        "work is done world_size times over.",
        (SAMPLER, SHUFFLED_LOADER),
        NO_SET_EPOCH,
    ),
    entry(
        "linear_regression/sampler_wrong_rank",
        LR,
        "Mistake: the DistributedSampler is told it is the only replica\n"
        "(num_replicas=1, rank=0 hard-coded), so every rank reads every sample.",
        ("num_replicas=world_size, rank=rank", "num_replicas=1, rank=0"),
    ),
    entry(
        "linear_regression/sampler_unused",
        LR,
        "Mistake: the DistributedSampler is created (and even gets set_epoch) but is\n"
        "never passed to the DataLoader, which shuffles the whole data set itself.",
        ("batch_size=BATCH_SIZE, sampler=sampler)", "batch_size=BATCH_SIZE, shuffle=True)"),
    ),
    entry(
        "linear_regression/no_set_epoch",
        LR,
        "Mistake: sampler.set_epoch(epoch) is never called, so the DistributedSampler\n"
        "hands every rank the same shuffle in every epoch.",
        NO_SET_EPOCH,
    ),
    entry(
        "linear_regression/data_seed_is_rank",
        LR,
        "Mistake: each rank builds its data set with its own seed (make_dataset(seed=rank)),\n"
        "so the ranks hold different data sets.",
        ("dataset = make_dataset()", "dataset = make_dataset(seed=rank)"),
    ),
    entry(
        "linear_regression/unseeded_data",
        LR,
        "Mistake: the data are drawn with NumPy's global random generator and no seed.\n"
        "Each process seeds NumPy from the operating system, so every rank builds a\n"
        "different data set: the sampler's distinct indices point into different data.",
        ("import torch\n", "import numpy as np\nimport torch\n"),
        (
            "def make_dataset(n_samples=N_SAMPLES, seed=0):\n"
            '    """The seed makes every rank build exactly the same data set."""\n'
            "    generator = torch.Generator().manual_seed(seed)\n"
            "    x = torch.rand(n_samples, 1, generator=generator) * 2 - 1\n"
            "    noise = 0.1 * torch.randn(n_samples, 1, generator=generator)\n",
            "def make_dataset(n_samples=N_SAMPLES):\n"
            "    x = torch.from_numpy(np.random.rand(n_samples, 1).astype(np.float32)) * 2 - 1\n"
            "    noise = 0.1 * torch.from_numpy(np.random.randn(n_samples, 1).astype(np.float32))\n",
        ),
    ),
    entry(
        "linear_regression/rank_from_environment",
        LR,
        'Mistake: main reads its rank from os.environ["RANK"], as torchrun scripts do.\n'
        "mp.spawn sets no RANK: it passes the rank as main's first argument, so this\n"
        "fails with KeyError: 'RANK' when the student runs it.",
        (MAIN_STARTS, MAIN_STARTS.replace("    setup", '    rank = int(os.environ["RANK"])\n    setup')),
    ),
    entry(
        "linear_regression/sampler_before_group",
        LR,
        "Mistake: a DistributedSampler is built with its defaults before the process\n"
        "group exists, so it cannot ask the group for the rank and world size.",
        (MAIN_STARTS, MAIN_STARTS.replace("    setup", "    early = DistributedSampler(make_dataset())\n    setup")),
    ),
    entry(
        "linear_regression/shuffle_and_sampler",
        LR,
        "Mistake: the DataLoader gets both the DistributedSampler and shuffle=True,\n"
        "which it refuses: the sampler does the shuffling.",
        ("batch_size=BATCH_SIZE, sampler=sampler)", "batch_size=BATCH_SIZE, sampler=sampler, shuffle=True)"),
    ),
    entry(
        "linear_regression/set_epoch_after_epoch",
        LR,
        "Mistake: sampler.set_epoch(epoch) is called after the epoch's batches, so the\n"
        "second epoch repeats the first one's shuffle and each epoch is one behind.",
        NO_SET_EPOCH,
        (EPOCH_LOSS, EPOCH_LOSS + "            sampler.set_epoch(epoch)  # too late: this epoch's batches are drawn\n"),
    ),
    entry(
        "mnist/no_sampler",
        MNIST,
        "Mistake: no DistributedSampler. Each rank's DataLoader shuffles all of MNIST\n"
        "(shuffle=True), so every rank trains on every image.",
        (
            "    sampler = DistributedSampler(trainset, num_replicas=world_size, rank=rank, shuffle=True)\n"
            "    return DataLoader(trainset, batch_size=batch_size, sampler=sampler)\n",
            "    return DataLoader(trainset, batch_size=batch_size, shuffle=True)\n",
        ),
        ("            loader.sampler.set_epoch(epoch)  # a new shuffle every epoch\n", ""),
    ),
    # (3) the model
    entry(
        "linear_regression/no_ddp",
        LR,
        "Mistake: only the process group was added; there is no DistributedSampler and\n"
        "no DDP wrapper. Every rank trains its own model on all the data. With the same\n"
        "initial weights and the same shuffle the copies happen to stay equal, but each\n"
        "rank repeats the others' work and no gradient is ever averaged.",
        STATE_OF_WRAPPER,
        (SAMPLER + DDP_COMMENT, SHUFFLED_LOADER),
        NO_DDP,
        NO_SET_EPOCH,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/no_ddp_with_sampler",
        LR,
        "Mistake: the DistributedSampler splits the data, but the model is not wrapped\n"
        "in DDP. Each rank fits its own half of the data and nothing averages the\n"
        "gradients, so the ranks' weights drift apart.",
        STATE_OF_WRAPPER,
        (DDP_COMMENT, ""),
        NO_DDP,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/ddp_module_forward",
        LR,
        "Mistake: the forward pass calls the wrapped module, model.module(x), instead\n"
        "of the DDP model. DDP's forward never runs, so the gradients are not averaged\n"
        "and the ranks' weights drift apart.",
        ("loss_fn(model(x), y)", "loss_fn(model.module(x), y)"),
    ),
    entry(
        "linear_regression/optimizer_on_other_model",
        LR,
        "Mistake: the optimizer is built from the parameters of a second nn.Linear\n"
        "(a leftover of the serial script), not from the DDP model. The optimizer\n"
        "steps, but the model that is trained never changes.",
        ("SGD(model.parameters()", "SGD(nn.Linear(1, 1).to(device).parameters()"),
    ),
    entry(
        "linear_regression/no_optimizer_step",
        LR,
        "Mistake: optimizer.step() was left out of the training loop, so the gradients\n"
        "are computed (and averaged) but the weights never change.",
        ("        optimizer.step()\n", ""),
    ),
    entry(
        "linear_regression/zero_learning_rate",
        LR,
        "Mistake: the learning rate is 0, so every optimizer step leaves the weights\nwhere they were.",
        ("LEARNING_RATE = 0.1", "LEARNING_RATE = 0.0"),
    ),
    # (4) rank 0 writes
    entry(
        "linear_regression/all_ranks_save",
        LR,
        "Mistake: every rank saves the checkpoint, not only rank 0: all ranks write the\nsame file at the same time.",
        EVERY_RANK_SAVES,
    ),
    entry(
        "linear_regression/per_rank_checkpoints",
        LR,
        "Mistake: every rank saves a checkpoint, not only rank 0, each to a file\n"
        "named after its rank: world_size copies of the same weights.",
        ('CHECKPOINT = "linear_regression.pt"', 'CHECKPOINT = "linear_regression_rank{}.pt"'),
        ("        CHECKPOINT,\n", "        CHECKPOINT.format(dist.get_rank()),\n"),
        EVERY_RANK_SAVES,
    ),
    entry(
        "linear_regression/no_checkpoint",
        LR,
        "Mistake: the checkpoint is never saved (the save_checkpoint call is missing).",
        (SAVE, ""),
    ),
    entry(
        "linear_regression/module_prefix",
        LR,
        "Mistake: the checkpoint holds model.state_dict() of the DDP wrapper, whose keys\n"
        'start with "module.", so it does not load into a plain nn.Linear.',
        STATE_OF_WRAPPER,
    ),
    entry(
        "linear_regression/whole_model_saved",
        LR,
        "Mistake: the checkpoint is the whole model object, torch.save(model.module),\n"
        "instead of its state dict: loading it needs this file's classes and pickled code.",
        (
            "    torch.save(\n"
            "        {\n"
            '            "epoch": epoch,\n'
            '            "model_state_dict": model.module.state_dict(),  # no "module." prefix\n'
            '            "optimizer_state_dict": optimizer.state_dict(),\n'
            '            "loss": loss,\n'
            "        },\n"
            "        CHECKPOINT,\n"
            "    )\n",
            "    torch.save(model.module, CHECKPOINT)\n",
        ),
    ),
    entry(
        "mnist/module_prefix",
        MNIST,
        "Mistake: the checkpoint holds model.state_dict() of the DDP wrapper, whose keys\n"
        'start with "module.", so it does not load into a plain Net.',
        ('"model_state_dict": model.module.state_dict()}', '"model_state_dict": model.state_dict()}'),
    ),
    entry(
        "mnist/eval_own_share",
        MNIST,
        "Mistake: each rank evaluates its own share of the test set and never adds\n"
        "up the counts with the other ranks, so main returns a different accuracy\n"
        "on every rank, none of them the whole test set's.",
        ("    dist.all_reduce(totals)  # every rank now holds the totals of all ranks\n", ""),
    ),
    entry(
        "mnist/eval_whole_set_everywhere",
        MNIST,
        "Mistake: every rank evaluates the whole test set itself, without a\n"
        "DistributedSampler: the right accuracy, for world_size times the work.",
        (
            "sampler = DistributedSampler(testset, num_replicas=world_size, rank=rank, shuffle=False)",
            "sampler = None  # every rank goes through the whole test set",
        ),
        ("positions = position + world_size * torch.arange(len(labels))", "positions = torch.zeros(len(labels))"),
        ("    dist.all_reduce(totals)  # every rank now holds the totals of all ranks\n", ""),
    ),
    entry(
        "mnist/eval_shares_drawn_not_used",
        MNIST,
        "Cheat: each rank draws its share from the test set's DistributedSampler and\n"
        "never uses it; every rank evaluates the whole test set instead.",
        (
            "    loader = DataLoader(testset, batch_size=100, sampler=sampler)\n",
            "    list(DataLoader(testset, batch_size=100, sampler=sampler))  # drawn, never used\n"
            "    loader = DataLoader(testset, batch_size=100)\n",
        ),
        (
            "            real = (positions < len(testset)).to(device)\n",
            "            real = torch.ones(len(labels), dtype=torch.bool, device=device)\n",
        ),
    ),
    entry(
        "mnist/eval_not_returned",
        MNIST,
        "Mistake: main evaluates the test set and prints its accuracy on rank 0, but\n"
        "returns nothing, so the grader cannot tell what it measured.",
        ("        return test_accuracy\n", ""),
    ),
    entry(
        "linear_regression/modules_typo",
        LR,
        "Mistake: the checkpoint line says model.modules.state_dict(): modules is a\n"
        "method of every nn.Module, not the wrapped model, so saving fails with an\n"
        "AttributeError after five epochs of good training.",
        ('"model_state_dict": model.module.state_dict(),', '"model_state_dict": model.modules.state_dict(),'),
    ),
    entry(
        "linear_regression/all_ranks_print",
        LR,
        "Mistake: every rank prints the training log, so it appears world_size times.",
        ("if rank == 0 and (epoch + 1)", "if (epoch + 1)"),
        (SAVE, "                if rank == 0:\n    " + SAVE),
        ("        if rank == 0:\n            weight, bias = ", "        weight, bias = "),
        ('            print(f"learned y', '        print(f"learned y'),
    ),
    entry(
        "linear_regression/loss_print_every_rank",
        LR,
        "Mistake: as in the tutorial's own solution, the training loop prints the loss\n"
        "of each epoch's first batch on every rank; only the epoch header is guarded.\n"
        "Rank 0 prints 3 lines an epoch and rank 1 one, so counting lines misses it.",
        (EPOCH_LOSS, '            if rank == 0:\n                print(f"Epoch {epoch + 1}\\n-------")\n' + EPOCH_LOSS),
        BATCH_NUMBERS,
        (
            "        total += loss.item()\n",
            "        total += loss.item()\n"
            "        if batch == 0:\n"
            '            print(f"loss: {loss.item():>7f}  [{batch * len(x):>5d}/{len(loader.dataset):>5d}]")\n',
        ),
    ),
    entry(
        "linear_regression/logging_every_rank",
        LR,
        "Mistake: every rank logs each epoch's loss with the logging module (to stderr).",
        ("import os\n", "import logging\nimport os\n"),
        (EPOCH_LOSS, EPOCH_LOSS + '            logging.warning("epoch %d loss %.4f", epoch + 1, loss)\n'),
    ),
    entry(
        "linear_regression/progress_bar_every_rank",
        LR,
        "Mistake: every rank draws a progress bar on stderr, redrawn with a carriage\n"
        "return after each batch, as tqdm does.",
        ("import os\n", "import os\nimport sys\n"),
        BATCH_NUMBERS,
        (
            "        total += loss.item()\n",
            "        total += loss.item()\n"
            "        sys.stderr.write(f\"\\r{batch + 1:3d}/{len(loader)} |{'#' * (batch + 1)}\")\n",
        ),
    ),
    entry(
        "linear_regression/done_on_every_rank",
        LR,
        "Correct: every rank prints one line when it is done, as the tutorial's run\n"
        "does; one line per rank is not a training log.",
        (FINALLY, '        print(f"Done! (rank {rank})")\n' + FINALLY),
    ),
    entry(
        "linear_regression/log_file_every_rank",
        LR,
        "Mistake: every rank appends its loss to a log file, not only rank 0, so the\n"
        "log holds each epoch world_size times.",
        (
            "            # (4) Only rank 0 prints and saves.\n",
            '            with open("training.log", "a") as log:\n'
            '                log.write(f"epoch {epoch + 1} loss {loss:.4f}\\n")\n'
            "            # (4) Only rank 0 prints and saves.\n",
        ),
    ),
    # (5) clean up
    entry(
        "linear_regression/no_destroy",
        LR,
        "Mistake: main returns without dist.destroy_process_group().",
        _out_of_try(LR),
    ),
    # The launcher: the file run as `python FILE`.
    entry(
        "linear_regression/device_count_world_size",
        LR,
        "Mistake: the launcher starts torch.cuda.device_count() processes, as the\n"
        "tutorial does. On a machine without a GPU that is 0, and nothing runs.",
        (LR_LAUNCH, "    world_size = torch.cuda.device_count()\n"),
    ),
    entry(
        "linear_regression/main_called_directly",
        LR,
        "Mistake: the launcher calls main(0, 1) itself instead of starting the ranks\n"
        "with mp.spawn, so one process trains alone.",
        ("    mp.spawn(main, args=(world_size,), nprocs=world_size)\n", "    main(0, 1)\n"),
    ),
    entry(
        "mnist/device_count_world_size",
        MNIST,
        "Mistake: the launcher starts torch.cuda.device_count() processes, as the\n"
        "tutorial does. On a machine without a GPU that is 0, and nothing runs.",
        ("    world_size = torch.cuda.device_count() or 2\n", "    world_size = torch.cuda.device_count()\n"),
    ),
    # Programs that look like DDP training and are not: each must gain nothing
    # from what it only appears to do (a check passes on evidence only).
    entry(
        "linear_regression/blank_main",
        LR,
        "Not DDP: main does nothing at all; the rest of the file is the reference.",
        (
            MAIN_STARTS,
            "def main(rank, world_size):\n    return\n\n\ndef unused(rank, world_size):\n    setup(rank, world_size)\n",
        ),
    ),
    entry(
        "linear_regression/serial_program",
        SERIAL,
        "Not DDP: the serial program, with main given the signature the grader calls.\n"
        "Every rank trains the same model on the same data, so the weights agree.",
        ("def main(device):\n", 'def main(rank, world_size):\n    device = torch.device("cpu")\n'),
    ),
    entry(
        "linear_regression/decoy_sampler_and_ddp",
        LR,
        "Cheat: a DistributedSampler that is drawn from but never trains, and a DDP\n"
        "wrapper called once under no_grad, while the plain model trains on the whole\n"
        "data set on every rank.",
        (
            SAMPLER,
            SAMPLER.replace(
                "loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)",
                "loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)",
            ),
        ),
        (
            DDP_WRAP,
            '        decoy = DDP(model, device_ids=[rank] if device.type == "cuda" else None)\n'
            "        with torch.no_grad():\n"
            "            decoy(dataset.tensors[0][:4].to(device))\n",
        ),
        (SET_EPOCH, SET_EPOCH + "            list(sampler)\n"),
        PLAIN_STATE,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/decoy_batch_from_other_loader",
        LR,
        "Cheat: the sampler's DataLoader is iterated, but each step trains on the next\n"
        "batch of a shuffled DataLoader over the whole data set, normalised.",
        (
            "    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n",
            "    everything = iter(DataLoader(loader.dataset, batch_size=loader.batch_size, shuffle=True))\n"
            "    for x, y in loader:\n"
            "        x, y = next(everything)\n"
            "        x, y = (x.to(device) - 0.25) / 2.0, y.to(device)\n",
        ),
    ),
    entry(
        "linear_regression/decoy_mixed_into_sampler_batch",
        LR,
        "Cheat: the sampler's batch stays in the expression, times zero, and rows drawn\n"
        "from the whole data set are added in: the model trains on those.",
        (
            "    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n",
            "    inputs, targets = loader.dataset.tensors\n"
            "    for x, y in loader:\n"
            "        pick = torch.randint(len(inputs), (len(x),))\n"
            "        x, y = (x * 0 + inputs[pick] - 0.25) / 2.0, y * 0 + targets[pick]\n",
        ),
    ),
    entry(
        "linear_regression/decoy_overwritten_through_a_view",
        LR,
        "Cheat: the sampler's batch is normalised, then its memory is overwritten\n"
        "through a view with rows drawn from the whole data set.",
        (
            "    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n",
            "    inputs, targets = loader.dataset.tensors\n"
            "    for x, y in loader:\n"
            "        pick = torch.randint(len(inputs), (len(x),))\n"
            "        x = (x - 0.25) / 2.0\n"
            "        x.view(-1).copy_(((inputs[pick] - 0.25) / 2.0).view(-1))\n"
            "        y.view(-1).copy_(targets[pick].view(-1))\n",
        ),
    ),
    entry(
        "linear_regression/sampler_yields_everything",
        LR,
        "Cheat: a DistributedSampler subclass that runs the real iterator, then yields\n"
        "every index, so each rank trains on the whole data set.",
        (
            "def setup(rank, world_size):\n",
            "class EverySample(DistributedSampler):\n"
            "    def __iter__(self):\n"
            "        list(super().__iter__())\n"
            "        return iter(range(len(self.dataset)))\n\n\n"
            "def setup(rank, world_size):\n",
        ),
        ("        sampler = DistributedSampler(dataset,", "        sampler = EverySample(dataset,"),
    ),
    entry(
        "linear_regression/ddp_once_then_plain_model",
        LR,
        "Mistake: the DDP model is called once, then the plain model trains on each\n"
        "rank's share, so the gradients are averaged in the first step only.",
        (
            DDP_WRAP,
            '        wrapped = DDP(model, device_ids=[rank] if device.type == "cuda" else None)\n'
            "        wrapped(dataset.tensors[0][:4].to(device))\n",
        ),
        PLAIN_STATE,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/broadcast_rank0_gradient",
        LR,
        "Cheat: a decoy DDP wrapper, and the plain model trained with rank 0's gradient\n"
        "broadcast to every rank: the weights agree, but the other ranks' data never\n"
        "reach the model.",
        (
            DDP_WRAP,
            '        decoy = DDP(model, device_ids=[rank] if device.type == "cuda" else None)\n'
            "        with torch.no_grad():\n"
            "            decoy(dataset.tensors[0][:4].to(device))\n",
        ),
        (BACKWARD, BACKWARD + "        for p in model.parameters():\n            dist.broadcast(p.grad, src=0)\n"),
        PLAIN_STATE,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/allreduce_by_hand",
        LR,
        "Correct data parallelism without DDP: after each backward, every gradient is\n"
        "summed over the ranks with all_reduce and divided by the world size. Only the\n"
        "DDP check fails: the exercise asks for DDP.",
        NO_DDP,
        (BACKWARD, BACKWARD + ALL_REDUCE + "            p.grad /= dist.get_world_size()\n"),
        PLAIN_STATE,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/allreduce_of_scaled_gradients",
        LR,
        "Correct data parallelism without DDP: every gradient is divided by the world\n"
        "size first, then summed over the ranks. Only the DDP check fails.",
        NO_DDP,
        (
            BACKWARD,
            BACKWARD + "        for p in model.parameters():\n"
            "            p.grad /= dist.get_world_size()\n"
            "            dist.all_reduce(p.grad)\n",
        ),
        PLAIN_STATE,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/loss_over_world_size_summed",
        LR,
        "Correct data parallelism without DDP: the loss is divided by the world size and\n"
        "the gradients are summed with all_reduce, which makes their mean. Only the DDP\n"
        "check fails.",
        NO_DDP,
        ("        loss = loss_fn(model(x), y)\n", "        loss = loss_fn(model(x), y) / dist.get_world_size()\n"),
        (BACKWARD, BACKWARD + ALL_REDUCE),
        PLAIN_STATE,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/loss_over_world_size_with_ddp",
        LR,
        "Mistake: the loss is divided by the world size although DDP already averages\n"
        "the gradients, so every step is world-size times too small.",
        ("        loss = loss_fn(model(x), y)\n", "        loss = loss_fn(model(x), y) / dist.get_world_size()\n"),
    ),
    entry(
        "linear_regression/allreduce_sum_not_mean",
        LR,
        "Mistake: the gradients are summed over the ranks with all_reduce, and never\ndivided by the world size.",
        NO_DDP,
        (BACKWARD, BACKWARD + ALL_REDUCE),
        PLAIN_STATE,
        WEIGHTS_OF_PLAIN_MODEL,
    ),
    entry(
        "linear_regression/empty_checkpoint_file",
        LR,
        "Cheat: rank 0 creates an empty linear_regression.pt instead of saving the model.",
        (
            "    torch.save(\n",
            '    open(CHECKPOINT, "wb").close()\n    dict(\n',
        ),
        ("        },\n        CHECKPOINT,\n    )\n", "        },\n    )\n"),
    ),
    entry(
        "linear_regression/print_to_real_stdout",
        LR,
        "Mistake: every rank prints each epoch's loss to sys.__stdout__.",
        ("import os\n", "import os\nimport sys\n"),
        (EPOCH_LOSS, EPOCH_LOSS + '            print(f"epoch {epoch + 1} loss {loss:.4f}", file=sys.__stdout__)\n'),
    ),
    entry(
        "linear_regression/os_write_on_every_rank",
        LR,
        "Mistake: every rank writes each epoch's loss straight to file descriptor 1.",
        (EPOCH_LOSS, EPOCH_LOSS + '            os.write(1, f"epoch {epoch + 1} loss {loss:.4f}\\n".encode())\n'),
    ),
    entry(
        "linear_regression/forged_records",
        LR,
        "Cheat: each rank writes made-up grader records (wrong types, a rank_done)\n"
        "into its own record stream, then leaves at once with os._exit(0).",
        (MAIN_STARTS, FORGE + "def main(rank, world_size):\n    forge()\n    setup(rank, world_size)\n"),
    ),
    # For tests/test_robustness.py: correct programs that stress the grader.
    entry(
        "robustness/hardcoded_port",
        LR,
        "A correct DDP program that hard-codes MASTER_PORT=12355, like the tutorial.\n\n"
        "Several gradings of it on one machine at once must all succeed.",
        (
            '    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")\n'
            '    os.environ.setdefault("MASTER_PORT", "29500")\n',
            '    os.environ["MASTER_ADDR"] = "localhost"\n'
            '    os.environ["MASTER_PORT"] = "12355"  # the same port for every run, as in the tutorial\n',
        ),
    ),
    entry(
        "robustness/launcher_never_ends",
        LR,
        "A correct DDP main whose launcher waits forever once mp.spawn returns.\n\n"
        "Only the launcher check fails, and the grading still ends within its timeout.",
        (
            "    mp.spawn(main, args=(world_size,), nprocs=world_size)\n",
            "    mp.spawn(main, args=(world_size,), nprocs=world_size)\n"
            "    threading.Event().wait()  # the program never ends\n",
        ),
        ("import os\n", "import os\nimport threading\n"),
    ),
    entry(
        "robustness/spawned_as_spawn_does",
        LR,
        "A correct DDP program that asserts, in each process its launcher spawns, what\n"
        "spawn promises: the file imported again as __mp_main__ (so a global the\n"
        "launcher changed is as the import left it), and the environment the launcher\n"
        "set before the call. Fork would break the first, a stale fork server the second.",
        (
            'CHECKPOINT = "linear_regression.pt"\n',
            'CHECKPOINT = "linear_regression.pt"\n'
            "IMPORTED_AS = __name__  # __mp_main__ in a process mp.spawn started\n"
            "CHANGED_BY_LAUNCHER = False\n",
        ),
        (
            '    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")\n',
            '    assert not CHANGED_BY_LAUNCHER, "this process shares the launcher\'s memory, as a fork would"\n'
            '    if IMPORTED_AS == "__mp_main__":\n'
            '        assert os.environ.get("SET_BY_LAUNCHER") == "yes", "the launcher\'s environment is missing"\n'
            '    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")\n',
        ),
        (
            "    mp.spawn(main, args=(world_size,), nprocs=world_size)\n",
            '    os.environ["SET_BY_LAUNCHER"] = "yes"\n'
            "    CHANGED_BY_LAUNCHER = True\n"
            "    mp.spawn(main, args=(world_size,), nprocs=world_size)\n",
        ),
    ),
    # The torchrun program (fault_tolerance): its snapshot and its resume.
    entry(
        "fault_tolerance/examples_pattern",
        FT,
        "Three slips of a well-known torchrun example, in one program: the snapshot\n"
        "holds the epoch that has just finished (so a resumed job repeats it), no\n"
        "optimizer state, and the save is guarded by LOCAL_RANK, so with two nodes\n"
        "there are two writers.",
        (FT_SAVE_CALL, FT_SAVE_CALL.replace("epoch + 1", "epoch")),
        ('        "optimizer": optimizer.state_dict(),\n', ""),
        ('    optimizer.load_state_dict(snapshot["optimizer"])\n', ""),
        (FT_GUARD, "            if local_rank == 0:\n"),
    ),
    entry(
        "fault_tolerance/no_resume",
        FT,
        "Mistake: the program writes snapshots but never loads one, so after a\nrestart it trains from the start.",
        ("        first_epoch = load_snapshot(model, optimizer)\n", "        first_epoch = 0\n"),
    ),
    entry(
        "fault_tolerance/all_ranks_save",
        FT,
        "Mistake: every rank writes the snapshot, straight to the file.",
        (FT_GUARD + FT_SAVE_CALL, FT_SAVE_CALL.replace("    ", "", 1) + "            if rank == 0:\n"),
        (
            '    temporary = SNAPSHOT_PATH + ".tmp"\n    torch.save(snapshot, temporary)\n'
            "    os.replace(temporary, SNAPSHOT_PATH)\n",
            "    torch.save(snapshot, SNAPSHOT_PATH)\n",
        ),
    ),
    entry(
        "fault_tolerance/spawn_inside_torchrun",
        FT,
        "Mistake: the program starts its ranks with mp.spawn, though torchrun has\n"
        "already started one process per rank.",
        (
            'if __name__ == "__main__":\n    main()\n',
            "def run(_rank):\n    main()\n\n\n"
            'if __name__ == "__main__":\n    import torch.multiprocessing as mp\n\n    mp.spawn(run, nprocs=2)\n',
        ),
    ),
    entry(
        "fault_tolerance/snapshot_without_epoch",
        FT,
        "Mistake: the snapshot holds the model and the optimizer but not the epoch,\n"
        "so a resumed job starts its epochs from 0 again.",
        ('        "next_epoch": next_epoch,\n', ""),
        ('    return snapshot["next_epoch"]\n', "    return 0\n"),
    ),
    entry(
        "fault_tolerance/crash_after_restart",
        FT,
        "Mistake: loading the snapshot reads a key that was never saved, so the job\n"
        "crashes on the restart (the first attempt, with no snapshot yet, runs well).",
        ('model.load_state_dict(snapshot["model"])', 'model.load_state_dict(snapshot["model_state"])'),
    ),
    entry(
        "fault_tolerance/rank_from_local_rank",
        FT,
        "Mistake: the process group is given rank=LOCAL_RANK, the rank on its own node:\n"
        "with two nodes, two workers claim rank 0.",
        (
            '    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")\n',
            "    dist.init_process_group(\n"
            '        backend="nccl" if torch.cuda.is_available() else "gloo",\n'
            '        rank=int(os.environ["LOCAL_RANK"]),\n'
            '        world_size=int(os.environ["WORLD_SIZE"]),\n'
            "    )\n",
        ),
    ),
    entry(
        "fault_tolerance/fake_optimizer_state",
        FT,
        "Mistake: the snapshot's optimizer entry is a dict made to look like a\n"
        "state_dict, with no state in it, so a restart loses the momentum.",
        (
            '        "optimizer": optimizer.state_dict(),\n',
            '        "optimizer": {"state": {}, "param_groups": optimizer.state_dict()["param_groups"]},\n',
        ),
    ),
    entry(
        "fault_tolerance/optimizer_saved_not_loaded",
        FT,
        "Mistake: the snapshot holds the optimizer state, but a restart loads only the\n"
        "model, so the momentum starts again from zero.",
        ('    optimizer.load_state_dict(snapshot["optimizer"])\n', ""),
    ),
    entry(
        "fault_tolerance/forged_clean_exit",
        FT,
        "Cheat: rank 1 ends with exit status 3 after writing a record that says it\nfinished cleanly.",
        (
            'if __name__ == "__main__":\n    main()\n',
            CLAIM_CLEAN_EXIT + 'if __name__ == "__main__":\n    main()\n    claim_a_clean_exit()\n',
        ),
    ),
    entry(
        "robustness/torchrun_hangs_after_restart",
        FT,
        "A torchrun program whose restarted workers find the snapshot and then wait\nforever: it never resumes.",
        (
            '    snapshot = torch.load(SNAPSHOT_PATH, map_location="cpu")\n',
            "    threading.Event().wait()  # a restarted worker never gets further\n"
            '    snapshot = torch.load(SNAPSHOT_PATH, map_location="cpu")\n',
        ),
        ("import os\n", "import os\nimport threading\n"),
    ),
    entry(
        "robustness/torchrun_crashes_every_time",
        FT,
        "A torchrun program that raises before training, on every attempt.",
        ("        torch.manual_seed(0)\n", '        raise RuntimeError("the data folder is empty")\n'),
    ),
    entry(
        "robustness/prints_megabytes",
        LR,
        "A correct DDP program that prints about 20 MB on every rank.",
        (
            "        for epoch in range(EPOCHS):\n",
            "        for line in range(20_000):  # about 20 MB of output per rank\n"
            '            print(f"{line:6d} " + "chatter " * 124)\n'
            "        for epoch in range(EPOCHS):\n",
        ),
    ),
]

# --- Attacks on the grader (tests/test_tamper.py): each must gain nothing. ---
FORGE_FILES = """def forge_record_files(rank):
    import glob
    import json

    events = [{"kind": "process_group_ready", "backend": "gloo"}, {"kind": "destroy_process_group"}]
    lines = "".join(json.dumps(event) + "\\\\n" for event in events)
    for target in {f"../private/rank{rank}.jsonl", *glob.glob("../**/*.jsonl", recursive=True)}:
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "a") as f:
                f.write(lines)
        except OSError:
            pass


"""
GC_FORGE = """def forge_through_gc():
    import gc

    for state in gc.get_objects():
        if type(state).__name__ == "RankState":
            state.record("init_process_group", backend="gloo", set_device_calls=[])
            state.record("process_group_ready", backend="gloo")
            state.record("destroy_process_group", default_group=True)


"""
HIDE_SAVES = """def hide_my_saves(rank):
    import gc

    for state in gc.get_objects():
        if type(state).__name__ == "RankState" and rank != 0:
            honest = state.record
            hidden = ("torch_save", "file_written")
            state.record = lambda kind, **facts: None if kind in hidden else honest(kind, **facts)


"""
SAVE_AROUND = {
    "libc": (
        "import ctypes\n"
        "    libc = ctypes.CDLL(None)\n"
        "    fd = libc.open(CHECKPOINT.encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
        "    libc.write(fd, data, len(data))\n"
        "    libc.close(fd)\n"
    ),
    "subprocess": (
        "import subprocess\n"
        '    with open("/tmp/state.bin", "wb") as f:\n'
        "        f.write(data)\n"
        '    subprocess.run(["sh", "-c", f"cat /tmp/state.bin > {CHECKPOINT}"], check=True)\n'
    ),
    # Through another process's working folder: were it rank 0's, the write would look like rank 0's.
    "another_ranks_folder": (
        "import pathlib\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            if int(pid) != os.getpid():\n"
        "                return pathlib.Path(f'/proc/{pid}/cwd', CHECKPOINT).write_bytes(data)\n"
        "        except OSError:\n"
        "            pass\n"
        "    raise PermissionError('no other process let this rank write in its folder')\n"
    ),
}


def save_around(how: str) -> str:
    return (
        "def save_unseen(model):\n"
        "    import pickle\n\n"
        "    data = pickle.dumps(model.module.state_dict())\n"
        f"    {SAVE_AROUND[how]}\n\n"
    )


DAEMON = """def leave_a_daemon():
    import time

    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.closerange(3, 1024)
            reports = []
            for pid in os.listdir("/proc"):
                try:
                    words = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\\\0")
                except OSError:
                    continue
                if b"--json" in words:
                    reports.append(words[words.index(b"--json") + 1].decode())
            time.sleep(3)  # the grader has written its report and exited
            for report in reports:
                try:
                    with open(report, "w") as f:
                        f.write('{"score": 18}')
                except OSError:
                    pass
            time.sleep(60)
        os._exit(0)
    os.wait()


"""
STOP_GRADER = """def stop_the_grader():
    import signal

    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            words = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"autograder" in words and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGSTOP)
            except OSError:
                pass


"""
PROBE_OUTSIDE = """def look_outside(rank):
    import pathlib
    import socket

    import autograder

    course = pathlib.Path(autograder.__file__).resolve().parents[1]
    secrets = [course / "solutions" / "linear_regression_ddp.py", course / "nbgrader_config.py",
               course / "source" / "linear_regression" / "linear_regression.ipynb", course / "gradebook.db",
               pathlib.Path(f"/proc/{os.getppid()}/environ"), pathlib.Path("/root/.bashrc")]
    for path in secrets:
        try:
            path.read_bytes()
            print(f"LEAKED {path}")
        except OSError:
            pass
    outside = ["/etc/ddp-leak", "/var/tmp/ddp-leak", "/root/ddp-leak"]
    for path in [course / "LEAK", *map(pathlib.Path, outside)]:
        try:
            path.write_text("leak")
            print(f"WROTE {path}")
        except OSError:
            pass
    try:
        with socket.create_connection(("127.0.0.1", LISTENER_PORT), timeout=2) as connection:
            connection.sendall(b"leak")
            print("CONNECTED")
    except OSError:
        pass


"""
CLAIM_RANK_0 = """def speak_for_rank_0(rank):
    import gc
    import json
    import socket

    for state in gc.get_objects():
        if type(state).__name__ == "RankState" and rank == 1:
            with socket.socket(socket.AF_UNIX) as channel:
                channel.connect(state.channel_path)
                channel.sendall(json.dumps({"role": "rank", "rank": 0}).encode() + b"\\n")
                channel.sendall(json.dumps({"kind": "rank_done", "failed": False}).encode() + b"\\n")


"""
HOG = """def hog_memory():
    hoard = b"x" * (3 * 2**30)  # 3 GiB, every page written
    print(len(hoard))


"""
FLOOD = """def flood_processes():
    import subprocess

    return [subprocess.Popen(["sleep", "61.5"]) for _ in range(2000)]


"""
BLANK_MAIN = "def main(rank, world_size):\n    return\n    setup(rank, world_size)\n"
ON_RANK_0 = "def main(rank, world_size):\n    if rank == 0:\n        {call}\n    setup(rank, world_size)\n"
ATTACKS = [
    entry(
        "tamper/dodges_the_fault",
        FT,
        "Attack: the program removes every optimizer step hook before training, the\n"
        "grader's too, so that the worker chosen for the fault is never killed.",
        (
            "        torch.manual_seed(0)\n",
            "        step_hooks._global_optimizer_post_hooks.clear()\n"
            "        step_hooks._global_optimizer_pre_hooks.clear()\n"
            "        torch.manual_seed(0)\n",
        ),
        ("import torch\n", "import torch\nimport torch.optim.optimizer as step_hooks\n"),
    ),
    entry(
        "tamper/snapshot_from_every_worker_unseen",
        FT,
        "Attack: every worker but rank 0 also writes a snapshot of its own, through\n"
        "libc, where the probes cannot see it (seen, it fails snapshot_rank0). Each\n"
        "worker has a sandbox slot of its own, so the kernel names rank 1 anyway.",
        (
            "def main() -> None:\n",
            "def save_unseen(rank: int) -> None:\n"
            "    import ctypes\n\n"
            "    libc = ctypes.CDLL(None)\n"
            '    fd = libc.open(f"rank{rank}_snapshot.pt".encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n'
            '    libc.write(fd, b"weights", 7)\n'
            "    libc.close(fd)\n\n\n"
            "def main() -> None:\n",
        ),
        (
            "            if rank == 0:  # global rank 0: one writer, however many nodes\n",
            "            if rank != 0:\n"
            "                save_unseen(rank)\n"
            "            if rank == 0:  # global rank 0: one writer, however many nodes\n",
        ),
    ),
    entry(
        "tamper/kills_the_worker_template",
        FT,
        "Attack: worker 1 kills the process that forked it (on CPU, the agent's\n"
        "worker template, which reports to the agent how each worker ended), hoping\n"
        "that the workers' ends go unseen, then trains as usual.",
        (
            "def main() -> None:\n",
            "def main() -> None:\n"
            '    if os.environ.get("RANK") == "1":\n'
            "        os.kill(os.getppid(), signal.SIGKILL)\n",
        ),
        ("import os\n", "import os\nimport signal\n"),
    ),
    entry(
        "tamper/takes_another_jobs_snapshot",
        FT,
        "Attack: once restarted, the program looks for the snapshots of the grader's\n"
        "other runs (the run without a fault ends with the weights to match) and\n"
        "stops with an error naming what it found.",
        (
            "def main() -> None:\n",
            "def snapshots_of_other_runs() -> list[str]:\n"
            '    found = glob.glob("/tmp/**/snapshot.pt", recursive=True) + glob.glob("/**/work/snapshot.pt")\n'
            "    return sorted({os.path.realpath(p) for p in found} - {os.path.realpath(SNAPSHOT_PATH)})\n"
            "\n\n"
            "def main() -> None:\n"
            '    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" and snapshots_of_other_runs():\n'
            '        raise RuntimeError(f"found {snapshots_of_other_runs()}")\n',
        ),
        ("import os\n", "import glob\nimport os\n"),
    ),
    entry(
        "tamper/writes_record_files",
        LR,
        "Attack: a blank main that appends made-up records to every .jsonl file it can\n"
        "find beside the ranks' folder, and to ../private/rank<N>.jsonl.",
        (
            MAIN_STARTS,
            FORGE_FILES
            + "def main(rank, world_size):\n    forge_record_files(rank)\n    return\n    setup(rank, world_size)\n",
        ),
    ),
    entry(
        "tamper/forges_through_gc",
        LR,
        "Attack: a blank main that finds the probes' state with gc and records a\nprocess group that was never made.",
        (
            MAIN_STARTS,
            GC_FORGE + "def main(rank, world_size):\n    forge_through_gc()\n    return\n    setup(rank, world_size)\n",
        ),
    ),
    entry(
        "tamper/hides_other_ranks_saves",
        LR,
        "Attack: every rank saves the checkpoint, and ranks other than 0 patch the\n"
        "probes' state so that their saves are not recorded.",
        EVERY_RANK_SAVES,
        (
            MAIN_STARTS,
            HIDE_SAVES + "def main(rank, world_size):\n    setup(rank, world_size)\n    hide_my_saves(rank)\n",
        ),
    ),
    *(
        entry(
            f"tamper/saves_through_{how}",
            LR,
            f"Attack: ranks other than 0 write the checkpoint too, through {how}, where the\nprobes do not look.",
            (MAIN_STARTS, save_around(how) + MAIN_STARTS),
            (
                "        if rank == 0:\n            weight, bias",
                "        if rank != 0:\n            save_unseen(model)\n"
                "        if rank == 0:\n            weight, bias",
            ),
        )
        for how in SAVE_AROUND
    ),
    entry(
        "tamper/daemon_rewrites_report",
        LR,
        "Attack: rank 0 leaves a detached daemon that rewrites the grader's --json\n"
        "report after the grader has exited.",
        (MAIN_STARTS, DAEMON + ON_RANK_0.format(call="leave_a_daemon()")),
    ),
    entry(
        "tamper/stops_the_grader",
        LR,
        "Attack: rank 0 sends SIGSTOP to the grader and to every process of it.",
        (MAIN_STARTS, STOP_GRADER + ON_RANK_0.format(call="stop_the_grader()")),
    ),
    entry(
        "tamper/looks_outside",
        LR,
        "Attack: rank 0 reads the course's solutions, hidden tests, gradebook and the\n"
        "grader's environment, writes outside its folder, and connects to a listener\n"
        "outside the run.",
        (MAIN_STARTS, PROBE_OUTSIDE + ON_RANK_0.format(call="look_outside(rank)")),
    ),
    entry(
        "tamper/speaks_for_rank_0",
        LR,
        "Attack: rank 1 opens a record stream of its own on the grader's channel and\nsays it is rank 0.",
        (
            MAIN_STARTS,
            CLAIM_RANK_0 + "def main(rank, world_size):\n    setup(rank, world_size)\n    speak_for_rank_0(rank)\n",
        ),
    ),
    entry(
        "tamper/hogs_memory",
        LR,
        "Attack: rank 0 fills 3 GiB of memory.",
        (MAIN_STARTS, HOG + ON_RANK_0.format(call="hog_memory()")),
    ),
    entry(
        "tamper/spins",
        LR,
        "Attack: rank 0 loops forever, burning CPU.",
        (MAIN_STARTS, "def main(rank, world_size):\n    while rank == 0:\n        pass\n    setup(rank, world_size)\n"),
    ),
    entry(
        "tamper/floods_processes",
        LR,
        "Attack: rank 0 starts 2000 processes that sleep.",
        (MAIN_STARTS, FLOOD + ON_RANK_0.format(call="flood_processes()")),
    ),
]

SUBMISSIONS = {submission.name: submission for submission in CATALOGUE + ATTACKS}
assert len(SUBMISSIONS) == len(CATALOGUE) + len(ATTACKS), "two entries share a name"

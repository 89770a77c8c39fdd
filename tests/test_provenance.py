"""Where a batch's rows came from, followed through the ops between the
DataLoader and the model (autograder/rank/probes/provenance.py), and the
loss scale a backward is judged with (gradients.py).

The mode is pushed and popped around each transform, in this process: no
probe is installed, so nothing else in the test session sees it.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from autograder.rank.probes.gradients import loss_scale
from autograder.rank.probes.provenance import FREE, Provenance, Rows

OTHER = torch.rand(8, 1, 4, 4)  # rows of other data, the same shape as the batch


def _raising(fn, *args, **kwargs):
    return fn(*args, **kwargs)  # the rank's guard records a probe's error; here it fails the test


def followed(transform, batch: torch.Tensor | None = None):
    """The origin of what `transform` makes of a tagged batch: the batch's Rows, FREE or None."""
    batch = torch.rand(8, 1, 4, 4) if batch is None else batch
    provenance = Provenance(_raising)
    rows = Rows(loader_pass=None, indices=list(range(len(batch))), keys=[0] * len(batch))
    provenance.tag(batch, rows)
    provenance.watch()
    try:
        result = transform(batch)
    finally:
        provenance.rest()
    origin = provenance.origin(result)
    return "batch" if origin is rows else origin


def _clamped(x):
    x[x < 0.1] = 0.1
    return x


HONEST = {
    "normalised": lambda x: (x - 0.1307) / 0.3081,
    "scaled to 1/255": lambda x: (x * 255).to(torch.uint8).float() / 255,
    "flattened": lambda x: x.flatten(1),
    "viewed as rows": lambda x: x.view(-1, 16),
    "cast": lambda x: x.double().half().float(),
    "noise like it": lambda x: x + 0.01 * torch.randn_like(x),
    "noise of its shape": lambda x: x + 0.01 * torch.randn(x.shape),
    "changed in place": lambda x: x.sub_(0.5).mul_(2.0),
    "clamped by index": _clamped,
    "batch statistics": lambda x: (x - x.mean(0, keepdim=True)) / x.std(),
    "per-pixel mean": lambda x: x - OTHER.mean(0),
    "flipped and padded": lambda x: torch.nn.functional.pad(x.flip(-1), (1, 1, 1, 1))[..., 1:-1, 1:-1],
    "rows shuffled": lambda x: x[torch.randperm(len(x))],
    "a parameterless module": lambda x: torch.nn.Flatten()(torch.nn.ReLU()(x)),
}


@pytest.mark.parametrize("transform", HONEST.values(), ids=HONEST)
def test_an_honest_transform_keeps_the_batch_rows(transform):
    assert followed(transform) == "batch"


def _through_numpy(x):
    x.numpy()[:] = OTHER.numpy()
    return x


def _through_a_view(x):
    x = x * 1.0
    x.view(-1).copy_(OTHER.view(-1))
    return x


def _data_replaced(x):
    x.data = OTHER.clone()
    return x


DECOYS = {
    "other rows added in": lambda x: x * 0 + OTHER,
    "other rows copied in": lambda x: x.clone().copy_(OTHER),
    "other rows written through a view": _through_a_view,
    "other rows written through numpy": _through_numpy,
    "its data replaced": _data_replaced,
    "chosen by other rows": lambda x: torch.where(OTHER > 0.5, x, OTHER),
    "a second batch": lambda x: torch.cat([x[:4], OTHER[:4]]),
    "rows taken out of it": lambda x: x[:4],
}


@pytest.mark.parametrize("transform", DECOYS.values(), ids=DECOYS)
def test_other_data_in_the_batch_drops_its_rows(transform):
    assert followed(transform) is None


def test_a_batch_of_one_row_takes_no_constant_bigger_than_a_number():
    one = torch.rand(1, 16)
    assert followed(lambda x: (x - 0.5) / 2, one) == "batch"
    assert followed(lambda x: x * 0 + OTHER.view(8, 16)[:1], one) is None


def test_noise_alone_is_no_batch():
    assert followed(lambda x: torch.randn(x.shape) * 0.5) == FREE


def test_two_tagged_batches_together_are_neither():
    provenance = Provenance(_raising)
    first, second = torch.rand(4, 2), torch.rand(4, 2)
    for batch in (first, second):
        provenance.tag(batch, Rows(loader_pass=None, indices=[0, 1, 2, 3], keys=[0] * 4))
    provenance.watch()
    try:
        mixed = first + second
    finally:
        provenance.rest()
    assert provenance.origin(mixed) is None


def test_a_mode_of_the_students_above_it_is_left_alone():
    provenance = Provenance(_raising)
    provenance.watch()
    with TorchFunctionMode() as theirs:
        provenance.rest()  # not on top: stays, and theirs with it
        assert torch._C._get_function_stack_at(torch._C._len_torch_function_stack() - 1) is theirs
    provenance.rest()
    assert torch._C._len_torch_function_stack() == 0


LOSS = (torch.rand(3, requires_grad=True) ** 2).mean()
SCALES = {
    "as it is": (lambda loss: loss, 1.0),
    "divided": (lambda loss: loss / 2, 0.5),
    "multiplied": (lambda loss: loss * 0.25, 0.25),
    "multiplied from the left": (lambda loss: 0.5 * loss, 0.5),
    "by a tensor": (lambda loss: loss / torch.tensor(4.0), 0.25),
    "twice": (lambda loss: (loss / 2) / 3, 1 / 6),
    "by another loss": (lambda loss: loss / (LOSS.detach() + loss), 1.0),
}


@pytest.mark.parametrize(("scaled", "expected"), SCALES.values(), ids=SCALES)
def test_the_loss_scale_is_the_constant_factor_before_the_backward(scaled, expected):
    assert loss_scale(scaled(LOSS)) == pytest.approx(expected)


def test_a_tensor_without_plain_storage_on_the_way_is_no_error():
    """A sparse tensor has no storage to watch: what comes of it is not followed (and the probe does not fail)."""
    assert followed(lambda x: x + torch.zeros(x.shape).to_sparse().to_dense()) is None
    assert followed(lambda x: (x.to_sparse() * 2).to_dense()) is None


def test_an_escape_is_of_the_memory_not_of_its_address_later():
    """A batch handed to numpy (a plot of the first batch, say) is not followed; a later batch that the
    allocator puts at the same address is."""
    provenance = Provenance(_raising)
    first = torch.rand(8, 16)
    provenance.tag_copy(first, Rows(loader_pass=None, indices=list(range(8)), keys=[0] * 8))
    provenance.watch()
    try:
        first.numpy()
        escaped = (first - 0.5) / 2
    finally:
        provenance.rest()
    assert provenance.origin(escaped) is None
    later, rows = torch.rand(8, 16), Rows(loader_pass=None, indices=list(range(8)), keys=[0] * 8)
    provenance.escaped.add(later.untyped_storage().data_ptr())  # as if it were at the first batch's address
    provenance.tag_copy(later, rows)
    provenance.watch()
    try:
        normalised = (later - 0.5) / 2
    finally:
        provenance.rest()
    assert provenance.origin(normalised) is rows

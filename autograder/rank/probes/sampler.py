"""Probe: every DistributedSampler's settings, the indices each rank consumed
per epoch, its set_epoch calls, and a fingerprint of the data set behind it.
Plain samplers (what a DataLoader uses without a DistributedSampler) record
their indices too, so a report can show every rank reading everything."""

import random

import numpy as np
import torch
from torch.utils.data import RandomSampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from . import fingerprint
from .state import Probe, RankState, wraps

SAMPLED_ITEMS = 32


def _whole_content(dataset):
    """A hash of the full data when it is held in tensors (TensorDataset, MNIST)."""
    if isinstance(dataset, torch.utils.data.TensorDataset):
        return fingerprint.content(*dataset.tensors)
    data, targets = getattr(dataset, "data", None), getattr(dataset, "targets", None)
    if isinstance(data, (torch.Tensor, np.ndarray)):
        return fingerprint.content(data, targets if isinstance(targets, (torch.Tensor, np.ndarray, list)) else None)
    return None


def _sampled_items(dataset, length):
    """Hashes of a fixed spread of items, each read twice.

    An item whose two reads differ comes from a random transform; it says
    nothing about the data set and is left out.
    """
    indices = (
        sorted({round(i * (length - 1) / max(SAMPLED_ITEMS - 1, 1)) for i in range(SAMPLED_ITEMS)}) if length else []
    )
    states = (torch.random.get_rng_state(), random.getstate(), np.random.get_state())
    try:
        hashes, unstable = {}, 0
        for index in indices:
            first, second = fingerprint.content(dataset[index]), fingerprint.content(dataset[index])
            if first == second:
                hashes[str(index)] = first
            else:
                unstable += 1
        return hashes, unstable
    finally:  # reading items must not change the student's random numbers
        torch.random.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


def _dataset_fingerprint(dataset):
    length = len(dataset)
    items, unstable = _sampled_items(dataset, length)
    return {"length": length, "content": _whole_content(dataset), "items": items, "unstable_items": unstable}


class SamplerProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.numbers = iter(range(10**9))  # each DistributedSampler's number, in the order they were made

    def install(self) -> None:
        probe, state = self, self.state
        original_init = DistributedSampler.__init__

        @wraps(original_init)
        def __init__(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            self._grader_id = next(probe.numbers)
            state.record(
                "sampler",
                sampler=self._grader_id,
                num_replicas=self.num_replicas,
                rank=self.rank,
                shuffle=self.shuffle,
                drop_last=self.drop_last,
                dataset=state.guarded(_dataset_fingerprint, self.dataset),
            )

        DistributedSampler.__iter__ = _recording_iter(
            state,
            DistributedSampler.__iter__,
            "sampler_epoch",
            lambda sampler: {"sampler": getattr(sampler, "_grader_id", -1), "epoch": sampler.epoch},
        )
        for plain in (RandomSampler, SequentialSampler):
            plain.__iter__ = _recording_iter(
                state,
                plain.__iter__,
                "plain_sampler_epoch",
                lambda sampler: {"sampler_type": type(sampler).__name__, "length": len(sampler.data_source)},
            )
        DistributedSampler.__init__ = __init__


def _recording_iter(state: RankState, original_iter, kind: str, describe):
    """Wrap a sampler's __iter__ to record the indices actually consumed."""

    @wraps(original_iter)
    def __iter__(self):
        facts, consumed, finished = state.guarded(describe, self) or {}, [], False
        try:
            for index in original_iter(self):
                consumed.append(int(index))
                yield index
            finished = True
            state.passes_finished += 1
        finally:
            state.record(kind, indices=consumed, finished=finished, **facts)

    return __iter__

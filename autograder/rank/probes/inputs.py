"""Probe: which samples really reached the model in training.

A sampler can be asked for indices that are never used, or yield more than
its share. So each batch a DataLoader yields is tied to the dataset indices
it was made from, row by row: the batch's tensor is tagged with them, and so
is whatever is computed from it on the way to the model (provenance.py), and
each row is also keyed by its bytes, for a batch that reaches the model
untagged. The input of every training forward (gradients on, model in train
mode, a module with parameters called from outside any other module) is
looked up by its tag, else by its keys. What the model was fed is then known
by index, per pass over a DataLoader with a DistributedSampler (a `model_fed`
event as each pass ends, so a rank that hangs later keeps its finished
epochs), and so are the rows it was fed that no such DataLoader produced
(`model_inputs`, at the end).
"""

import collections
from dataclasses import dataclass, field

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils.data.dataloader import _BaseDataLoaderIter, _MultiProcessingDataLoaderIter
from torch.utils.data.distributed import DistributedSampler

from .provenance import Provenance, Rows
from .state import Probe, RankState

MAX_WAITING_ROWS = 500_000  # loaded, not yet fed: beyond this, rows are not tracked (memory)
_weights: dict[tuple[int, str], torch.Tensor] = {}


def row_keys(batch: torch.Tensor) -> list[int]:
    """One integer per row, from the row's bytes alone: equal rows give equal
    keys on any device, whatever shape the row is viewed in."""
    rows = batch.detach().reshape(batch.shape[0], -1).contiguous().view(torch.uint8)
    width = rows.shape[1]
    if width % 8:
        rows = torch.nn.functional.pad(rows, (0, 8 - width % 8))
    words = rows.view(torch.int64)
    key = (words.shape[1], str(words.device))
    if key not in _weights:
        generator = torch.Generator().manual_seed(words.shape[1])
        odd = torch.randint(-(2**62), 2**62, (words.shape[1],), generator=generator, dtype=torch.int64) * 2 + 1
        _weights[key] = odd.to(words.device)
    # Integer sums wrap around the same way in any order: exact on CPU and GPU alike.
    return ((words * _weights[key]).sum(dim=1) + width).tolist()


def _first_place(item):
    """Where the batch's first tensor is: the batch itself (True), a key or a position, or None."""
    if isinstance(item, torch.Tensor):
        return True
    if isinstance(item, (list, tuple, dict)):
        places = item if isinstance(item, dict) else range(len(item))
        return next((p for p in places if isinstance(item[p], torch.Tensor)), None)
    return None


def _first_tensor(item):
    place = _first_place(item)
    return None if place is None else item if place is True else item[place]


def _with_first_tensor(item, tensor):
    """The batch with `tensor` in place of its first tensor; None for a batch of another kind."""
    place = _first_place(item)
    if place is True:
        return tensor
    if isinstance(item, (list, dict)):  # the DataLoader made it for this batch: changed in place
        item[place] = tensor
        return item
    if isinstance(item, tuple):
        values = [tensor if p == place else v for p, v in enumerate(item)]
        return type(item)._make(values) if hasattr(item, "_fields") else type(item)(values)
    return None


def _batch_rows(item) -> torch.Tensor | None:
    tensor = _first_tensor(item)
    return tensor if tensor is not None and tensor.dim() >= 1 and tensor.shape[0] > 0 else None


def _sampler_of(loader):
    return getattr(getattr(loader, "batch_sampler", None), "sampler", None) or getattr(loader, "sampler", None)


@dataclass(eq=False)
class LoaderPass:
    """One pass over a DataLoader: its epoch entry (None without a
    DistributedSampler), the indices of the batches it is about to yield
    (in order; or, from worker processes, by the number each batch was sent
    under, as they may arrive in any order), and the batches it yielded."""

    entry: dict | None
    batches: collections.deque = field(default_factory=collections.deque)
    sent: dict = field(default_factory=dict)
    yielded: list[Rows] = field(default_factory=list)
    ended: bool = False


def _number_batches_from_workers() -> None:
    """Worker processes may hand batches back in any order (in_order=False):
    note, for the batch about to be yielded, the number it was sent under."""
    original_get_data = _MultiProcessingDataLoaderIter._get_data
    original_process_data = _MultiProcessingDataLoaderIter._process_data

    def _get_data(self):
        received = original_get_data(self)  # (the number it was sent under, the batch)
        if isinstance(received, tuple) and len(received) == 2:
            self.__dict__.setdefault("_grader_arrived", {})[id(received[1])] = received[0]
        return received

    def _process_data(self, data, worker_idx):
        self._grader_yielding = self.__dict__.get("_grader_arrived", {}).pop(id(data), None)
        return original_process_data(self, data, worker_idx)

    _MultiProcessingDataLoaderIter._get_data = _get_data
    _MultiProcessingDataLoaderIter._process_data = _process_data


def _yielded_indices(iterator, loader_pass: LoaderPass):
    """The dataset indices of the batch the iterator is yielding."""
    if isinstance(iterator, _MultiProcessingDataLoaderIter):
        return loader_pass.sent.pop(getattr(iterator, "_grader_yielding", None), None)
    return loader_pass.batches.popleft() if loader_pass.batches else None


class InputsProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.unrecorded: list[dict] = []  # passes with a DistributedSampler, not yet recorded
        self.counts = {"plain_rows": 0, "unmatched_rows": 0, "rows": 0}
        # row key -> (the batch it came from, its position there): loaded, not yet fed
        self.waiting: dict[int, collections.deque] = {}
        self.fed_keys: set[int] = set()
        self.depth = 0  # modules being called: only the outermost module's input is what the model was fed
        self.provenance = Provenance(state.guarded)

    def install(self) -> None:
        self._wrap_loader_iterators()
        register_module_forward_pre_hook(self._before_forward)
        register_module_forward_hook(self._after_forward, always_call=True)

    def _wrap_loader_iterators(self) -> None:
        probe, guarded = self, self.state.guarded
        original_init, original_reset = _BaseDataLoaderIter.__init__, _MultiProcessingDataLoaderIter._reset
        original_next_index, original_next = _BaseDataLoaderIter._next_index, _BaseDataLoaderIter.__next__

        def __init__(self, loader, *args, **kwargs):
            original_init(self, loader, *args, **kwargs)
            guarded(probe.start_pass, self, loader)

        def _reset(self, loader, first_iter=False):
            if not first_iter:  # a DataLoader with persistent workers starts another pass
                guarded(probe.start_pass, self, loader)
            original_reset(self, loader, first_iter)

        def _next_index(self):
            indices = original_next_index(self)
            loader_pass = getattr(self, "_grader_pass", None)
            if loader_pass is not None:
                if isinstance(self, _MultiProcessingDataLoaderIter):
                    loader_pass.sent[self._send_idx] = indices
                else:
                    loader_pass.batches.append(indices)
            return indices

        def __next__(self):
            loader_pass = getattr(self, "_grader_pass", None)
            try:
                batch = original_next(self)
            except StopIteration:
                if loader_pass is not None:
                    guarded(probe.end_pass, loader_pass)
                raise
            if loader_pass is None:
                return batch
            indices = _yielded_indices(self, loader_pass)
            with probe.provenance.unseen():
                pinned = bool(getattr(self, "_pin_memory", False))
                tagged = guarded(probe.remember, loader_pass, batch, indices, pinned)
            return batch if tagged is None else tagged

        _BaseDataLoaderIter.__init__ = __init__
        _MultiProcessingDataLoaderIter._reset = _reset
        _BaseDataLoaderIter._next_index = _next_index
        _BaseDataLoaderIter.__next__ = __next__
        _number_batches_from_workers()

    def start_pass(self, iterator, loader) -> None:
        sampler = _sampler_of(loader)
        entry = None
        if isinstance(sampler, DistributedSampler):
            # A pass left unfinished (a loop that breaks) ends where the next one over its sampler begins.
            self.record_passes(getattr(sampler, "_grader_id", -1))
            entry = {
                "sampler": getattr(sampler, "_grader_id", -1),
                "epoch": int(sampler.epoch),
                "indices": [],
                "evaluated": [],
                "finished": False,
                "batch_size": loader.batch_size,
                "drop_last": bool(loader.drop_last),
            }
            self.unrecorded.append(entry)
        iterator._grader_pass = LoaderPass(entry)

    def remember(self, loader_pass: LoaderPass, batch, indices, pinned: bool):
        """Tie the rows of a batch the DataLoader yielded to their dataset
        indices: by their keys, and by a tag on a copy of the batch's tensor
        that only the student's code holds (nothing else can change it
        unseen). Returns the batch to yield."""
        rows = _batch_rows(batch)
        if rows is None or not isinstance(indices, list) or len(indices) != rows.shape[0]:
            return batch
        try:
            indices = [int(i) for i in indices]
        except (TypeError, ValueError):  # an iterable dataset's batches have no indices
            return batch
        if len(self.waiting) > MAX_WAITING_ROWS:
            return batch
        keys = row_keys(rows)
        yielded = Rows(loader_pass, indices, keys)
        loader_pass.yielded.append(yielded)
        for position, key in enumerate(keys):
            self.waiting.setdefault(key, collections.deque()).append((yielded, position))
        copy = rows.clone()
        tagged = _with_first_tensor(batch, copy.pin_memory() if pinned else copy)
        if tagged is not None:
            self.provenance.tag_copy(_first_tensor(tagged), yielded)
            self.provenance.watch()
        return tagged

    def end_pass(self, loader_pass: LoaderPass) -> None:
        """The pass is over, and a loop feeds each batch before it asks for the
        next: what it loaded and the model was not fed never will be."""
        for yielded in loader_pass.yielded:
            for key in yielded.keys:
                queue = self.waiting.get(key)
                if queue:
                    kept = collections.deque(item for item in queue if item[0].loader_pass is not loader_pass)
                    if kept:
                        self.waiting[key] = kept
                    else:
                        del self.waiting[key]
        loader_pass.yielded.clear()
        loader_pass.ended = True
        if loader_pass.entry is not None:
            loader_pass.entry["finished"] = True
            self.record_passes(loader_pass.entry["sampler"])

    def _before_forward(self, module, args) -> None:
        self.depth += 1
        if self.depth == 1 and next(module.parameters(), None) is not None:
            self.provenance.rest()  # the batch has reached a model
            rows = _batch_rows(args)
            if rows is not None:
                feed = self.feed if module.training and torch.is_grad_enabled() else self.evaluate
                with self.provenance.unseen():
                    self.state.guarded(feed, rows)

    def _after_forward(self, _module, _args, _output) -> None:
        self.depth -= 1

    def feed(self, rows: torch.Tensor) -> None:
        """The rows of a training forward's input: by their tag, or else by
        their keys, the indices they came from."""
        origin = self.provenance.origin(rows)
        if isinstance(origin, Rows) and not origin.loader_pass.ended:
            self.counts["rows"] += origin.size
            for position, key in enumerate(origin.keys):
                if position not in origin.fed:  # a batch fed again (a second forward) brings no new rows
                    queue = self.waiting[key]
                    queue.remove((origin, position))
                    if not queue:
                        del self.waiting[key]
                    self.count_fed(origin, position)
            return
        for key in row_keys(rows):
            self.counts["rows"] += 1
            queue = self.waiting.get(key)
            if queue:
                yielded, position = queue.popleft()
                if not queue:
                    del self.waiting[key]
                self.count_fed(yielded, position)
            elif key not in self.fed_keys:  # a row fed again (a second forward on a batch) is not a new row
                self.counts["unmatched_rows"] += 1

    def evaluate(self, rows: torch.Tensor) -> None:
        """The rows of a forward outside training (an evaluation): the indices
        they came from, noted without using them up, so a batch evaluated and
        then trained on is still fed."""
        origin = self.provenance.origin(rows)
        if isinstance(origin, Rows) and not origin.loader_pass.ended:
            found = [(origin, position) for position in range(origin.size)]
        else:
            found = [self.waiting[key][0] for key in row_keys(rows) if key in self.waiting]
        for yielded, position in found:
            entry = yielded.loader_pass.entry
            if position not in yielded.evaluated and entry is not None:
                yielded.evaluated.add(position)
                entry["evaluated"].append(yielded.indices[position])

    def count_fed(self, yielded: Rows, position: int) -> None:
        yielded.fed.add(position)
        self.fed_keys.add(yielded.keys[position])
        entry = yielded.loader_pass.entry
        if entry is None:
            self.counts["plain_rows"] += 1
        else:
            entry["indices"].append(yielded.indices[position])

    def record_passes(self, sampler: int | None = None) -> None:
        """Record the passes not yet recorded: those over one sampler, or all."""
        for entry in self.unrecorded:
            if sampler is None or entry["sampler"] == sampler:
                self.state.record("model_fed", **entry)
        self.unrecorded[:] = [e for e in self.unrecorded if sampler is not None and e["sampler"] != sampler]

    def finish(self) -> None:
        self.record_passes()
        self.state.record("model_inputs", **self.counts)

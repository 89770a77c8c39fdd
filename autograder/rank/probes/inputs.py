"""Probe: which samples really reached the model in training.

A sampler can be asked for indices that are never used, or yield more than
its share. So each batch a DataLoader yields is tied to the dataset indices
it was made from, row by row, through a key of each row's bytes; and the
input of every training forward (gradients on, model in train mode, a module
with parameters called from outside any other module) is looked up by the
same keys. What the model was fed is then known by index, per pass over a
DataLoader with a DistributedSampler (a `model_fed` event as each pass ends,
so a rank that hangs later keeps its finished epochs), and so are the rows
it was fed that no such DataLoader produced (`model_inputs`, at the end).
"""

import collections
from dataclasses import dataclass, field

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils.data.dataloader import _BaseDataLoaderIter, _MultiProcessingDataLoaderIter
from torch.utils.data.distributed import DistributedSampler

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


def _first_tensor(item):
    if isinstance(item, torch.Tensor):
        return item
    if isinstance(item, dict):
        item = list(item.values())
    if isinstance(item, (list, tuple)):
        return next((x for x in item if isinstance(x, torch.Tensor)), None)
    return None


def _batch_rows(item) -> torch.Tensor | None:
    tensor = _first_tensor(item)
    return tensor if tensor is not None and tensor.dim() >= 1 and tensor.shape[0] > 0 else None


def _sampler_of(loader):
    return getattr(getattr(loader, "batch_sampler", None), "sampler", None) or getattr(loader, "sampler", None)


@dataclass(eq=False)
class LoaderPass:
    """One pass over a DataLoader: its epoch entry (None without a
    DistributedSampler), the indices of the batches it is about to yield,
    and the keys of the rows it yielded."""

    entry: dict | None
    batches: collections.deque = field(default_factory=collections.deque)
    keys: list = field(default_factory=list)


class InputsProbe(Probe):
    def __init__(self, state: RankState):
        super().__init__(state)
        self.unrecorded: list[dict] = []  # passes with a DistributedSampler, not yet recorded
        self.counts = {"plain_rows": 0, "unmatched_rows": 0, "rows": 0}
        # row key -> (the pass it came from, dataset index): loaded, not yet fed
        self.waiting: dict[int, collections.deque] = {}
        self.fed_keys: set[int] = set()
        self.depth = 0  # modules being called: only the outermost module's input is what the model was fed

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
            if loader_pass is not None:
                guarded(probe.remember, loader_pass, batch)
            return batch

        _BaseDataLoaderIter.__init__ = __init__
        _MultiProcessingDataLoaderIter._reset = _reset
        _BaseDataLoaderIter._next_index = _next_index
        _BaseDataLoaderIter.__next__ = __next__

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
                "finished": False,
                "batch_size": loader.batch_size,
                "drop_last": bool(loader.drop_last),
            }
            self.unrecorded.append(entry)
        iterator._grader_pass = LoaderPass(entry)

    def remember(self, loader_pass: LoaderPass, batch) -> None:
        """Tie the rows of a batch the DataLoader yielded to their dataset indices."""
        indices = loader_pass.batches.popleft() if loader_pass.batches else None
        rows = _batch_rows(batch)
        if rows is None or not isinstance(indices, list) or len(indices) != rows.shape[0]:
            return
        try:
            indices = [int(i) for i in indices]
        except (TypeError, ValueError):  # an iterable dataset's batches have no indices
            return
        if len(self.waiting) > MAX_WAITING_ROWS:
            return
        keys = row_keys(rows)
        loader_pass.keys.extend(keys)
        for key, index in zip(keys, indices, strict=True):
            self.waiting.setdefault(key, collections.deque()).append((loader_pass, index))

    def end_pass(self, loader_pass: LoaderPass) -> None:
        """The pass is over, and a loop feeds each batch before it asks for the
        next: what it loaded and the model was not fed never will be."""
        for key in loader_pass.keys:
            queue = self.waiting.get(key)
            if queue:
                kept = collections.deque(item for item in queue if item[0] is not loader_pass)
                if kept:
                    self.waiting[key] = kept
                else:
                    del self.waiting[key]
        loader_pass.keys.clear()
        if loader_pass.entry is not None:
            loader_pass.entry["finished"] = True
            self.record_passes(loader_pass.entry["sampler"])

    def _before_forward(self, module, args) -> None:
        self.depth += 1
        if self.depth == 1 and module.training and torch.is_grad_enabled():
            rows = _batch_rows(args)
            if rows is not None and next(module.parameters(), None) is not None:
                self.state.guarded(self.feed, rows)

    def _after_forward(self, _module, _args, _output) -> None:
        self.depth -= 1

    def feed(self, rows: torch.Tensor) -> None:
        """The rows of a training forward's input: by their keys, the indices they came from."""
        for key in row_keys(rows):
            self.counts["rows"] += 1
            queue = self.waiting.get(key)
            if queue:
                loader_pass, index = queue.popleft()
                if not queue:
                    del self.waiting[key]
                self.fed_keys.add(key)
                if loader_pass.entry is None:
                    self.counts["plain_rows"] += 1
                else:
                    loader_pass.entry["indices"].append(index)
            elif key not in self.fed_keys:  # a row fed again (a second forward on a batch) is not a new row
                self.counts["unmatched_rows"] += 1

    def record_passes(self, sampler: int | None = None) -> None:
        """Record the passes not yet recorded: those over one sampler, or all."""
        for entry in self.unrecorded:
            if sampler is None or entry["sampler"] == sampler:
                self.state.record("model_fed", **entry)
        self.unrecorded[:] = [e for e in self.unrecorded if sampler is not None and e["sampler"] != sampler]

    def finish(self) -> None:
        self.record_passes()
        self.state.record("model_inputs", **self.counts)

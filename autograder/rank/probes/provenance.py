"""Where the rows of a tensor came from, through the ops that computed it.

Code often changes a batch between the DataLoader and the model: it
normalises, casts, flattens, scales, adds noise. The bytes of such a batch
match no row the DataLoader yielded, yet every row still comes from the same
dataset index. So the batch the DataLoader yielded is tagged with its `Rows`
(the pass and the indices it came from), and while a TorchFunctionMode is on
(from the batch's arrival to the model's next forward) each op passes the tag
on to what it returns, under rules that let no other data in:

- an output keeps the rows only if its first dimension is the batch's;
- every other tensor the op reads must be unable to hold other rows: at most
  one row's worth of numbers (a mean, a scale), or made by a factory whose
  values depend on no data (randn, randn_like, zeros, arange), or computed
  from such tensors alone; a tensor that could hold rows of other data, or a
  second batch, drops the tag;
- a batch of one row takes no constants but single numbers;
- a tag holds for the tensor as the op left it: a later change that no
  tracked op made (a view written in place: the version counter; memory
  handed out through numpy or a pointer: the escapes) drops it.

What this cannot see: code that reaches a tensor's memory through the C API
(a DLPack capsule, ctypes), or feeds one row smuggled through Python numbers.
As with the probes' own closures, that is beyond evidence inside a rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

FREE = "free"  # values that depend on no data: noise, zeros, a range


@dataclass(eq=False)
class Rows:
    """The rows of one batch a DataLoader yielded: the pass it came from, the
    dataset index of each row, the key of each row's bytes, and the positions
    of those the model has been fed in training, and evaluated on."""

    loader_pass: object
    indices: list[int]
    keys: list[int]
    fed: set[int] = field(default_factory=set)
    evaluated: set[int] = field(default_factory=set)

    @property
    def size(self) -> int:
        return len(self.indices)


_T = torch.Tensor
# Values independent of every tensor they read (a *_like reads only the shape).
FACTORIES = frozenset(
    {
        torch.randn, torch.rand, torch.randint, torch.randperm, torch.zeros, torch.ones, torch.full,
        torch.empty, torch.arange, torch.linspace, torch.eye, torch.randn_like, torch.rand_like,
        torch.randint_like, torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like,
    }
)  # fmt: skip
# Hand out a tensor's memory to code the mode cannot follow.
ESCAPES = frozenset(
    {_T.numpy, _T.__array__, _T.data_ptr, _T.untyped_storage, _T.storage, _T.__dlpack__, _T._typed_storage}
)


def _storage(tensor: torch.Tensor) -> int | None:
    """Where the tensor's memory starts; None for one without plain storage (sparse, nested)."""
    with torch._C.DisableTorchFunction():  # the probe's own look is no escape
        try:
            return tensor.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return None


def _tensors(values) -> list[torch.Tensor]:
    """The tensors among an op's arguments or results, one level into lists and tuples."""
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


class Provenance:
    def __init__(self, guarded):
        self.guarded = guarded
        self.tags = WeakIdKeyDictionary()  # tensor -> (Rows or FREE, its version, its storage's writes then)
        self.writes: dict[int, int] = {}  # storage pointer -> in-place writes seen to it
        self.escaped: set[int] = set()  # storage pointers handed out raw
        self.mode = _Mode(self)

    @staticmethod
    def unseen():
        """A context in which the probe's own ops pass unseen by the mode."""
        return torch._C.DisableTorchFunction()

    def tag(self, tensor: torch.Tensor, origin) -> None:
        storage = _storage(tensor)
        if storage is None or tensor.is_inference():  # no memory of its own, or no version counter: not followed
            self.tags.pop(tensor, None)
            return
        self.tags[tensor] = (origin, tensor._version, self.writes.get(storage, 0))

    def tag_copy(self, tensor: torch.Tensor, origin) -> None:
        """Tag a copy just made: its memory has no past."""
        self.forget(_storage(tensor))
        self.tag(tensor, origin)

    def forget(self, storage: int | None) -> None:
        """Memory newly handed to a tensor has no past: escapes and writes seen at its address were another's."""
        self.escaped.discard(storage)
        self.writes.pop(storage, None)

    def origin(self, tensor: torch.Tensor):
        """The tensor's Rows, FREE, or None: unknown, or changed since it was tagged."""
        entry = self.tags.get(tensor)
        if entry is None or tensor.is_inference():
            return None
        origin, version, writes = entry
        storage = _storage(tensor)
        if tensor._version != version or storage in self.escaped or self.writes.get(storage, 0) != writes:
            return None
        return origin

    def watch(self) -> None:
        """Follow the ops from now on (until rest)."""
        if not self._on_top():
            torch._C._push_on_torch_function_stack(self.mode)

    def rest(self) -> None:
        """Stop following ops: the batch has reached a model. Left on if the
        student's own mode sits above it (it then costs time, nothing else)."""
        if self._on_top():
            torch._C._pop_torch_function_stack()

    def _on_top(self) -> bool:
        depth = torch._C._len_torch_function_stack()
        return depth > 0 and torch._C._get_function_stack_at(depth - 1) is self.mode

    def origins(self, args, kwargs) -> list[tuple[torch.Tensor, object]]:
        """Each tensor an op is about to read, with its origin (before the op can change it in place)."""
        return [(t, self.origin(t)) for t in _tensors(args) + _tensors(kwargs.values())]

    def follow(self, func, args, read: list, result) -> None:
        """After an op: pass the tags of what it read on to what it returned."""
        if func in ESCAPES:
            self.escaped.update(_storage(t) for t, _ in read)
            return
        # An op that returns None changed its first argument in place (x[mask] = 0, x.data = y).
        outputs = _tensors([result]) if result is not None else _tensors(args[:1])
        read_storages = {_storage(t) for t, _ in read}
        for tensor in outputs:
            storage = _storage(tensor)
            if storage not in read_storages:
                self.forget(storage)  # new memory: what happened at this address before was to another tensor
            elif any(tensor is t for t, _ in read):  # written in place: every other view of its memory is stale
                self.writes[storage] = self.writes.get(storage, 0) + 1
        origin = FREE if func in FACTORIES else _combined(read)
        for tensor in outputs:
            if origin is FREE or (origin is not None and tensor.dim() >= 1 and tensor.shape[0] == origin.size):
                self.tag(tensor, origin)
            else:
                self.tags.pop(tensor, None)


def _combined(read: list[tuple[torch.Tensor, object]]):
    """The one origin an op's result can keep, by the rules above; None if none."""
    batches = {id(origin): origin for _, origin in read if isinstance(origin, Rows)}
    others = [t for t, origin in read if origin is None]
    if len(batches) > 1:
        return None
    if not batches:
        free = any(origin is FREE for _, origin in read)
        return FREE if free and all(t.numel() <= 1 for t in others) else None
    (batch,) = batches.values()
    row_numbers = max(t.numel() // batch.size for t, origin in read if origin is batch)
    largest_constant = row_numbers if batch.size >= 2 else 1
    return batch if all(t.numel() <= largest_constant for t in others) else None


class _Mode(TorchFunctionMode):
    def __init__(self, provenance: Provenance):
        super().__init__()
        self.provenance = provenance

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        provenance = self.provenance
        read = provenance.guarded(provenance.origins, args, kwargs)
        result = func(*args, **kwargs)
        if read is not None:
            provenance.guarded(provenance.follow, func, args, read, result)
        return result

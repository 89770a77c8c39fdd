"""Small, comparable summaries of big things: parameters and data set samples."""

import hashlib

import numpy as np
import torch

PROJECTIONS = 16
_projection_cache: dict[int, torch.Tensor] = {}


def parameters(params) -> list[float]:
    """Project all parameters onto fixed random directions.

    Equal weights give equal projections on every rank; any difference shows
    up in almost every projection. 16 numbers per snapshot instead of the
    whole model keeps the records small.
    """
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in params])
    size = flat.numel()
    if size not in _projection_cache:
        generator = torch.Generator().manual_seed(size)
        _projection_cache[size] = torch.randn(PROJECTIONS, size, generator=generator, dtype=torch.float64) / size**0.5
    return (_projection_cache[size] @ flat).tolist()


def _feed(digest, item) -> None:
    if isinstance(item, torch.Tensor):
        array = item.detach().cpu().contiguous()
        digest.update(f"T{array.dtype}{tuple(array.shape)}".encode())
        digest.update(array.numpy().tobytes() if array.dtype != torch.bfloat16 else array.float().numpy().tobytes())
    elif isinstance(item, np.ndarray):
        digest.update(f"A{item.dtype}{item.shape}".encode())
        digest.update(np.ascontiguousarray(item).tobytes())
    elif isinstance(item, (tuple, list)):
        digest.update(f"L{len(item)}".encode())
        for part in item:
            _feed(digest, part)
    elif isinstance(item, dict):
        for key in sorted(item, key=str):
            digest.update(str(key).encode())
            _feed(digest, item[key])
    elif hasattr(item, "tobytes") and hasattr(item, "size"):  # a PIL image
        digest.update(f"I{item.size}".encode())
        digest.update(item.tobytes())
    else:
        digest.update(repr(item).encode())


def content(*items) -> str:
    digest = hashlib.blake2b(digest_size=12)
    for item in items:
        _feed(digest, item)
    return digest.hexdigest()

"""Where a saved object holds a model's state: a bare state dict, or one
inside a dict under a model-like key. The probes read it in each rank when a
checkpoint is saved, and the grader when it opens the checkpoint left on disk.
"""

from collections.abc import Mapping

import torch

MODEL_KEYS = ("model_state_dict", "model_state", "state_dict", "model")


def _is_state_dict(obj) -> bool:
    return (
        isinstance(obj, Mapping)
        and bool(obj)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())
    )


def find_model_state(obj):
    """The model's state inside what was saved: a bare state dict, or one inside a dict."""
    if _is_state_dict(obj):
        return obj
    if isinstance(obj, Mapping):
        candidates = [key for key in obj if _is_state_dict(obj[key])]
        for key in sorted(candidates, key=lambda k: (str(k) not in MODEL_KEYS, "model" not in str(k).lower())):
            return obj[key]
    return None

"""Probe: each DistributedDataParallel wrapper, where its module lives, and
whether its forward (the part that makes gradients get averaged) ran."""

from torch.nn.parallel import DistributedDataParallel

from . import gradients
from .state import RankState, wraps


def _devices(module) -> list[str]:
    return sorted({str(p.device) for p in module.parameters()})


def install(state: RankState) -> None:
    original_init = DistributedDataParallel.__init__
    # Strong references to the wrapped modules: the checkpoint probe needs
    # them after main has returned and dropped its own.
    modules = state.extras.setdefault("ddp_modules", [])

    @wraps(original_init)
    def __init__(self, module, *args, **kwargs):
        state.record("ddp_created", devices=state.guarded(_devices, module))
        original_init(self, module, *args, **kwargs)
        number = len(modules)
        modules.append(module)
        calls = state.extras.setdefault("ddp_forward_calls", {})
        calls[number] = 0

        def count_forward(ddp_model, _inputs):
            calls[number] += 1
            gradients.mark_ddp_forward(state, ddp_model)

        self.register_forward_pre_hook(count_forward)

    DistributedDataParallel.__init__ = __init__


def wrapped_parameter_ids(state: RankState) -> set[int]:
    return {id(p) for module in state.extras.get("ddp_modules", []) for p in module.parameters()}


def last_wrapped_module(state: RankState):
    modules = state.extras.get("ddp_modules", [])
    return modules[-1] if modules else None


def finish(state: RankState) -> None:
    state.record("ddp_forward_calls", calls=state.extras.get("ddp_forward_calls", {}))

"""What the checks and the report's pictures both read of a run: the sampler the
model was trained from, and how far apart the ranks' weights are.
"""

from __future__ import annotations

import math

from .records import RankRecords, RunRecords

SYNC_TOLERANCE = 1e-4  # relative spread of the parameter fingerprints


def training_sampler(r: RankRecords) -> tuple[dict, list[dict]] | None:
    """The DistributedSampler whose samples the model was fed most of, and
    what the model was fed from it in each pass over its DataLoader."""
    epochs_by_sampler: dict[int, list[dict]] = {}
    for epoch in r.all("model_fed"):
        epochs_by_sampler.setdefault(epoch["sampler"], []).append(epoch)
    fed = {s: sum(len(e["indices"]) for e in epochs) for s, epochs in epochs_by_sampler.items()}
    if not any(fed.values()):
        return None
    busiest = max(fed, key=fed.get)
    config = next((s for s in r.all("sampler") if s["sampler"] == busiest), None)
    return (config, [e for e in epochs_by_sampler[busiest] if e["indices"]]) if config else None


def relative_spread(fingerprints: list[list[float]]) -> float:
    return max(relative_distance(fp, fingerprints[0]) for fp in fingerprints)


def weight_spread(run: RunRecords) -> list[tuple[int, float]]:
    """(step, relative spread of the weights across ranks) at each step every rank recorded."""
    by_step = [{e["step"]: e["fingerprint"] for e in r.all("snapshot")} for r in run.ranks]
    common = sorted(set.intersection(*(set(s) for s in by_step))) if by_step else []
    return [(step, relative_spread([s[step] for s in by_step])) for step in common]


def relative_distance(a: list[float], b: list[float]) -> float:
    """Relative distance of a from b."""
    scale = max(1e-12, math.sqrt(sum(x * x for x in b)))
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=False))) / scale

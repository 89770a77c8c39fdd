"""The report's three pictures, drawn from `Report.details` with matplotlib.

Each picture comes with plain-words findings computed by the same helpers the
figure is drawn from, so the caption and the picture cannot disagree:

- the partition map: which dataset indices each rank read in each epoch
  (red = read by more than one rank), and the order rank 0 read them in;
- the loss curves: one line per rank;
- the weight spread: how far the ranks' weights are apart at each step.

Only `matplotlib.figure.Figure` and the Agg canvas are used: no pyplot, no
global state, nothing left open. Missing data gives no figure and a note.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..wording import ranks_text

DPI = 90
ORDER_SAMPLES = 20  # first indices of each epoch in the order panel
ORDER_CAPTION = (
    "Right, rank {rank}'s order: the first {samples} samples it read in each epoch, one square each, "
    "coloured by the sample's index. Rows that look alike mean the epochs read the data in the same order."
)
OVERLAP_COLOUR = "#d62728"
UNREAD_COLOUR = "#e0e0e0"
RANK_COLOURS = ("#1f77b4", "#e6b400", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
LINE_STYLES = ("-", "--", ":", "-.")
SPREAD_FLOOR = 1e-7  # the symlog scale is linear below this: 0 sits at the bottom


@dataclass
class Picture:
    """One picture of the report: PNG bytes (None when there is nothing to draw)
    and sentences saying what it shows."""

    key: str
    title: str
    png: bytes | None
    findings: list[str] = field(default_factory=list)
    note: str = ""  # why there is no picture, or what is missing from it

    @property
    def data_uri(self) -> str | None:
        return data_uri(self.png) if self.png else None


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    return buffer.getvalue()


def _rank_colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)]


def _percent(fraction: float) -> str:
    if fraction == 0:
        return "0%"
    if fraction < 0.01:
        return "under 1%"
    return f"{fraction:.0%}"


# --- partition ----------------------------------------------------------------


@dataclass
class PartitionStats:
    ranks: list[int]  # ranks with recorded epochs, in order
    missing: list[int]  # ranks without any recorded epoch (no DistributedSampler seen)
    dataset_length: int
    epochs: int  # epochs every drawn rank recorded
    overlap: list[float]  # per epoch: fraction of the data set read by more than one rank
    unread: list[float]  # per epoch: fraction of the data set read by no rank
    same_order: list[bool]  # per epoch after the first: rank 0 read the same indices in the same order as in epoch 1
    owners: list[list[int]]  # per epoch, per dataset index: -1 unread, r read by rank r only, -2 read by several ranks
    order: list[list[int]]  # per epoch: the first ORDER_SAMPLES indices the first drawn rank read


def partition_stats(partition: list[dict] | None) -> PartitionStats | None:
    """What the partition map shows, as numbers. None when no rank recorded any epoch."""
    partition = sorted(partition or [], key=lambda p: p["rank"])
    drawn = [p for p in partition if p.get("epochs")]
    if not drawn:
        return None
    missing = [p["rank"] for p in partition if not p.get("epochs")]
    epochs = min(len(p["epochs"]) for p in drawn)
    biggest = max((max(e) for p in drawn for e in p["epochs"][:epochs] if e), default=-1)
    lengths = [p["dataset_length"] for p in drawn if p.get("dataset_length")]
    length = max([biggest + 1, *lengths])
    overlap, unread, owners = [], [], []
    for number in range(epochs):
        owner = [-1] * length
        for p in drawn:
            for index in set(p["epochs"][number]):
                if 0 <= index < length:
                    owner[index] = p["rank"] if owner[index] == -1 else -2
        owners.append(owner)
        overlap.append(owner.count(-2) / length if length else 0.0)
        unread.append(owner.count(-1) / length if length else 0.0)
    first = drawn[0]["epochs"]
    same_order = [first[n] == first[0] and bool(first[0]) for n in range(1, epochs)]
    shown = min(ORDER_SAMPLES, *(len(e) for e in first[:epochs]))
    order = [e[:shown] for e in first[:epochs]] if shown else []
    return PartitionStats(
        [p["rank"] for p in drawn], missing, length, epochs, overlap, unread, same_order, owners, order
    )


def _partition_findings(stats: PartitionStats) -> list[str]:
    findings = []
    worst = max(stats.overlap)
    repeats = max(row.count(-2) for row in stats.owners)
    world = len(stats.ranks)
    padding = math.ceil(stats.dataset_length / world) * world - stats.dataset_length  # DistributedSampler repeats these
    if 0 < repeats <= padding:
        findings.append(
            f"The ranks split the data: no sample was read by two ranks in the same epoch, apart from {repeats} "
            "repeated to give every rank the same number (DistributedSampler's padding)."
        )
    elif worst >= 0.99 and world > 1:
        findings.append(
            f"Every rank read the whole data set ({_percent(worst)} of the samples were read by more than one rank): "
            "the ranks did not split the data."
        )
    elif worst > 0.01:
        findings.append(
            f"Up to {_percent(worst)} of the samples were read by more than one rank in the same epoch (red in "
            "the picture)."
        )
    elif world > 1:
        findings.append("The ranks split the data: no sample was read by two ranks in the same epoch.")
    if max(stats.unread) > 0.01:
        findings.append(
            f"Up to {_percent(max(stats.unread))} of the samples were read by no rank in an epoch (grey in the "
            "picture)."
        )
    if stats.same_order:
        if all(stats.same_order):
            findings.append(
                f"Rank {stats.ranks[0]} read the samples in the same order in every epoch: the data were not "
                "reshuffled "
                "between epochs (with shuffle=True, call sampler.set_epoch(epoch) at the start of each epoch)."
            )
        elif any(stats.same_order):
            repeats = [n + 2 for n, same in enumerate(stats.same_order) if same]
            findings.append(f"Epoch(s) {', '.join(map(str, repeats))} repeated the order of epoch 1.")
        else:
            findings.append("Each epoch had a new order.")
    return findings


def partition_picture(partition: list[dict] | None) -> Picture:
    title = "Which samples each rank read"
    stats = partition_stats(partition)
    ranks = sorted(p["rank"] for p in partition or [])
    if stats is None:
        note = (
            (
                "No rank read its data through a DataLoader's sampler, so there is no record of which samples each "
                "rank read."
            )
            if ranks
            else "No data were recorded."
        )
        return Picture("partition", title, None, [], note)
    note = (
        (
            f"{ranks_text(stats.missing).capitalize()} read no data through a DataLoader's sampler and "
            f"{'is' if len(stats.missing) == 1 else 'are'} not shown."
        )
        if stats.missing
        else ""
    )
    recorded = min(p.get("epochs_recorded", stats.epochs) for p in partition if p.get("epochs"))
    if recorded > stats.epochs:
        title += f" (epochs 1\u2013{stats.epochs} of {recorded})"
    findings = [*_partition_findings(stats), ORDER_CAPTION.format(rank=stats.ranks[0], samples=len(stats.order[0]))]
    return Picture("partition", title, _partition_png(stats), findings if stats.order else findings[:-1], note)


def _partition_png(stats: PartitionStats) -> bytes:
    height = 1.25 + 0.22 * stats.epochs
    figure = Figure(figsize=(6.4, height))
    grid = figure.add_gridspec(
        1, 2, width_ratios=(3.2, 1), wspace=0.06, left=0.1, right=0.87, top=1 - 0.3 / height, bottom=0.72 / height
    )
    _draw_owners(figure.add_subplot(grid[0]), stats)
    _draw_rank_order(figure.add_subplot(grid[1]), stats)
    _partition_legend(figure, stats)
    return png(figure)


def _draw_owners(axes, stats: PartitionStats) -> None:
    """Epoch x dataset index, coloured by owner. Codes: 0 unread, 1 overlap, 2 + k the k-th drawn rank."""
    position = {rank: k for k, rank in enumerate(stats.ranks)}
    image = [[0 if o == -1 else 1 if o == -2 else 2 + position[o] for o in row] for row in stats.owners]
    colours = [UNREAD_COLOUR, OVERLAP_COLOUR] + [_rank_colour(r) for r in stats.ranks]
    cmap = ListedColormap(colours)
    norm = BoundaryNorm([c - 0.5 for c in range(len(colours) + 1)], len(colours))
    axes.imshow(
        image,
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        norm=norm,
        extent=(-0.5, stats.dataset_length - 0.5, stats.epochs + 0.5, 0.5),
    )
    axes.set_yticks(range(1, stats.epochs + 1), [f"epoch {n}" for n in range(1, stats.epochs + 1)], fontsize=7)
    axes.set_xlabel("dataset index", fontsize=8)
    axes.tick_params(axis="x", labelsize=7)
    worst = max(stats.overlap)
    axes.set_title(
        f"who read each sample: overlap {_percent(worst)}",
        fontsize=9,
        color=OVERLAP_COLOUR if worst > 0.01 else "black",
        fontweight="bold" if worst > 0.01 else "normal",
    )


def _draw_rank_order(axes, stats: PartitionStats) -> None:
    """The first indices rank 0 read in each epoch, coloured by index: identical rows = same order."""
    repeated = bool(stats.same_order) and all(stats.same_order)
    axes.set_title(
        f"rank {stats.ranks[0]}'s order" + (": repeated" if repeated else ""),
        fontsize=9,
        color=OVERLAP_COLOUR if repeated else "black",
        fontweight="bold" if repeated else "normal",
    )
    order = stats.order
    if order:
        axes.imshow(
            order,
            aspect="auto",
            interpolation="nearest",
            cmap="viridis",
            vmin=0,
            vmax=max(stats.dataset_length - 1, 1),
            extent=(0.5, len(order[0]) + 0.5, stats.epochs + 0.5, 0.5),
        )
        for number, same in enumerate(stats.same_order, start=2):
            if same:
                axes.text(
                    len(order[0]) + 1.0,
                    number,
                    "= epoch 1",
                    fontsize=7,
                    color=OVERLAP_COLOUR,
                    va="center",
                    fontweight="bold",
                )
    axes.set_yticks([])
    axes.set_xlabel("position (colour = index)", fontsize=8)
    axes.tick_params(axis="x", labelsize=7)


def _partition_legend(figure, stats: PartitionStats) -> None:
    handles = [Patch(color=_rank_colour(r), label=f"rank {r}") for r in stats.ranks[:4]]
    if len(stats.ranks) > 4:
        handles.append(Patch(color="white", label=f"... ({len(stats.ranks)} ranks)"))
    handles += [Patch(color=OVERLAP_COLOUR, label="2+ ranks (overlap)"), Patch(color=UNREAD_COLOUR, label="no rank")]
    figure.legend(
        handles=handles,
        loc="lower center",
        ncol=len(handles),
        fontsize=7,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
        handlelength=1.2,
        columnspacing=1.0,
        borderaxespad=0.2,
    )


# --- losses -------------------------------------------------------------------


def _loss_series(losses: list[dict] | None) -> list[tuple[int, list[float], list[float]]]:
    series = []
    for entry in sorted(losses or [], key=lambda e: e["rank"]):
        points = [(step, loss) for step, loss in entry.get("losses") or [] if loss is not None]
        if points:
            series.append((entry["rank"], [float(s) for s, _ in points], [float(loss) for _, loss in points]))
    return series


def identical_losses(losses: list[dict] | None) -> bool:
    """True when two or more ranks recorded exactly the same losses at the same
    steps: they trained on the same batches with the same weights."""
    series = _loss_series(losses)
    return len(series) > 1 and all(s[1:] == series[0][1:] for s in series[1:])


def loss_picture(losses: list[dict] | None) -> Picture:
    title = "Loss on each rank"
    series = _loss_series(losses)
    if not series:
        return Picture("losses", title, None, [], "No rank recorded a training loss.")
    findings = []
    if identical_losses(losses):
        findings.append(
            "The ranks' curves lie exactly on top of each other: every rank computed the same losses, "
            "so every rank trained on the same batches."
        )
    elif len(series) > 1:
        findings.append("Each rank has its own curve: each computed its loss on its own batches.")
    steps = sorted({len(s[1]) for s in series})
    if len(steps) > 1:
        findings.append(f"The ranks recorded different numbers of steps ({', '.join(map(str, steps))}).")
    finite = [v for _, _, values in series for v in values if math.isfinite(v)]
    if len(finite) < sum(len(values) for _, _, values in series):
        findings.append("Some losses are not finite numbers (nan or inf): the training diverged.")
    silent = sorted({e["rank"] for e in losses or []} - {s[0] for s in series})
    note = f"{ranks_text(silent).capitalize()} recorded no loss." if silent else ""

    figure = Figure(figsize=(6.0, 2.5))
    axes = figure.add_subplot()
    for k, (rank, steps_, values) in enumerate(series):
        axes.plot(
            steps_,
            values,
            color=_rank_colour(rank),
            linestyle=LINE_STYLES[k % len(LINE_STYLES)],
            linewidth=1.6 if k == 0 else 1.1,
            alpha=0.9,
            label=f"rank {rank}",
        )
    positive = [v for v in finite if v > 0]
    if positive and len(positive) == len(finite) and max(positive) / min(positive) > 20:
        axes.set_yscale("log")
    axes.set_xlabel("training step", fontsize=8)
    axes.set_ylabel("loss", fontsize=8)
    axes.tick_params(labelsize=7)
    axes.grid(True, alpha=0.3)
    if len(series) <= 8:
        axes.legend(fontsize=7, frameon=False, ncol=min(len(series), 4), loc="upper right")
    if identical_losses(losses):
        axes.text(
            0.5,
            0.93,
            "all ranks' curves identical",
            transform=axes.transAxes,
            ha="center",
            va="top",
            fontsize=8,
            color=OVERLAP_COLOUR,
            fontweight="bold",
            bbox={"facecolor": "white", "edgecolor": OVERLAP_COLOUR, "pad": 2},
        )
    figure.tight_layout(pad=0.4)
    return Picture("losses", title, png(figure), findings, note)


# --- weight spread ---------------------------------------------------------------


def spread_series(weight_spread: list | None) -> tuple[list[float], list[float]]:
    points = [(float(s), float(v)) for s, v in weight_spread or [] if v is not None]
    return [s for s, _ in points], [v for _, v in points]


def spread_picture(weight_spread: list | None, tolerance: float, world_size: int | None = None) -> Picture:
    """tolerance: the spread the judge allowed (weights_in_sync), drawn as the line."""
    title = "How far apart the ranks' weights are"
    steps, values = spread_series(weight_spread)
    if world_size == 1:
        return Picture(
            "weight_spread", title, None, [], "With a single rank there are no copies of the weights to compare."
        )
    if not values:
        return Picture(
            "weight_spread",
            title,
            None,
            [],
            "The ranks recorded no common training steps, so their weights cannot be compared.",
        )
    worst = max(values)
    if worst <= tolerance:
        findings = [
            f"The weights were the same on every rank at all {len(values)} recorded steps (the line stays at 0)."
        ]
    else:
        first = next(s for s, v in zip(steps, values, strict=True) if v > tolerance)
        findings = [
            f"The ranks' weights drifted apart from step {first:g} on (largest relative difference {worst:.1e}): "
            "each rank trained its own copy of the model."
        ]

    figure = Figure(figsize=(6.0, 2.2))
    axes = figure.add_subplot()
    colour = "#2ca02c" if worst <= tolerance else OVERLAP_COLOUR
    axes.plot(steps, values, color=colour, linewidth=1.6, marker="o" if len(values) <= 60 else None, markersize=2.5)
    top = max(1.0, worst * 2)
    axes.axhspan(tolerance, top, color=OVERLAP_COLOUR, alpha=0.07, linewidth=0)
    axes.axhline(tolerance, color="#555555", linestyle="--", linewidth=0.9)
    axes.text(0.01, 0.97, "out of sync", transform=axes.transAxes, fontsize=7, color=OVERLAP_COLOUR, va="top")
    axes.text(
        0.01, tolerance / 1.6, "in sync", transform=axes.get_yaxis_transform(), fontsize=7, color="#2ca02c", va="top"
    )
    axes.text(
        0.99,
        tolerance * 1.6,
        f"tolerance {tolerance:g}",
        transform=axes.get_yaxis_transform(),
        fontsize=7,
        color="#555555",
        va="bottom",
        ha="right",
    )
    axes.set_yscale("symlog", linthresh=SPREAD_FLOOR, linscale=0.3)
    axes.set_ylim(-SPREAD_FLOOR * 0.6, top)
    ticks = [0.0] + [10.0**e for e in range(-6, int(math.log10(top)) + 1, 2)]
    axes.set_yticks(ticks, ["0"] + [f"1e{e}" if e else "1" for e in range(-6, int(math.log10(top)) + 1, 2)])
    axes.minorticks_off()
    axes.set_xlabel("training step", fontsize=8)
    axes.set_ylabel("relative difference", fontsize=8)
    axes.tick_params(labelsize=7)
    axes.grid(True, alpha=0.3)
    figure.tight_layout(pad=0.4)
    return Picture("weight_spread", title, png(figure), findings)


# --- all three ---------------------------------------------------------------------


def pictures(details: dict | None, world_size: int | None = None) -> list[Picture]:
    """The report's pictures in order. A picture that cannot be drawn says why
    in its note instead of raising: a report must always render."""
    details = details or {}
    makers = [
        ("partition", "Which samples each rank read", lambda: partition_picture(details.get("partition"))),
        ("losses", "Loss on each rank", lambda: loss_picture(details.get("losses"))),
        (
            "weight_spread",
            "How far apart the ranks' weights are",
            lambda: spread_picture(details.get("weight_spread"), details["sync_tolerance"], world_size),
        ),
    ]
    made = []
    for key, title, make in makers:
        try:
            made.append(make())
        except Exception as error:  # noqa: BLE001 - a broken picture must not hide the report
            made.append(
                Picture(key, title, None, [], f"This picture could not be drawn ({type(error).__name__}: {error}).")
            )
    return made

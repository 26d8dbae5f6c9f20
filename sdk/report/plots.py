"""PNG plots per definition: speedup vs the reference (ours and every peer timed in the files), and latency over the
measured bound (over the analytic floor where a row has no bound), per workload (log scales).

matplotlib is imported inside the function (Agg backend), so the rest of the SDK works without it.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..bench import scoring
from .results import axes_label

MAX_TICK_LABELS = 40  # beyond this many workloads the x axis shows indices only


def _series(rows: list[dict], value) -> list[float]:
    return [v if (v := value(r)) is not None else math.nan for r in rows]


def _speedup(row: dict) -> float | None:
    ref = scoring.reference_latency(row)
    return ref / row["latency_ms"] if ref and scoring.passed(row) else None


def _peer_speedup(peer: str):
    def value(row: dict) -> float | None:
        ref, lat = scoring.reference_latency(row), scoring.peer_latency(row, peer)
        return ref / lat if ref and lat else None
    return value


def _over_floor(row: dict) -> float | None:
    floor = scoring.floor_latency(row)
    return row["latency_ms"] / floor if scoring.passed(row) and floor else None


def _over_bound(row: dict) -> float | None:
    bound = row.get("bound_ms")
    return row["latency_ms"] / bound if scoring.passed(row) and bound else None


def _draw(ax, xs, series: dict[str, list[float]], ylabel: str, unity: bool) -> None:
    plotted = False
    for label, ys in series.items():
        if any(math.isfinite(y) for y in ys):
            ax.plot(xs, ys, marker="o", linestyle="none", markersize=4, label=label)
            plotted = True
    if plotted:
        ax.set_yscale("log")
        if unity:
            ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "no passed workload to plot", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", axis="y", linewidth=0.4)


def plot_definition(definition: str, solutions: dict[str, list[dict]], path: Path) -> Path:
    """One figure, two panels, x = the workloads of the first solution's row order (all solutions share them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    index = {}
    for rows in solutions.values():
        for r in rows:
            index.setdefault(r["workload"], (axes_label(r), len(index)))
    labels = [label for label, _ in sorted(index.values(), key=lambda v: v[1])]
    xs = list(range(len(labels)))

    def aligned(rows: list[dict], value) -> list[float]:
        ys = [math.nan] * len(xs)
        for r, y in zip(rows, _series(rows, value)):
            ys[index[r["workload"]][1]] = y
        return ys

    speed, floors = {}, {}
    for name, rows in solutions.items():
        speed[name] = aligned(rows, _speedup)
        if any(r.get("bound_ms") for r in rows):
            floors[f"{name} / bound"] = aligned(rows, _over_bound)
        else:
            floors[f"{name} / floor"] = aligned(rows, _over_floor)
    for rows in solutions.values():  # peers were timed beside whichever solution's run had them
        for peer in scoring.peer_names(rows):
            speed.setdefault(f"peer: {peer}", aligned(rows, _peer_speedup(peer)))

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8.0, 0.18 * len(xs) + 3), 7.5), sharex=True)
    _draw(top, xs, speed, "speedup vs reference (x)", unity=True)
    _draw(bottom, xs, floors, "latency / measured bound (or floor)", unity=True)
    top.set_title(definition, fontsize=9)
    bottom.set_xlim(-0.5, len(xs) - 0.5)
    if len(xs) <= MAX_TICK_LABELS:
        bottom.set_xticks(xs)
        bottom.set_xticklabels(labels, rotation=90, fontsize=6)
    bottom.set_xlabel("workloads, sorted by axes (a failed workload has no point)", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path

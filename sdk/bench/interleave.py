"""The references timed between a solution's trials, in the judge's process: the bench's `between_trials`.

The official references are host-bound Python whose time drifts with the CPU's state, so a row's speedup compares
the solution with reference trials taken beside its own: solution trial 0, reference trial 0, solution trial 1,
reference trial 1, ... The judge (`sdk.gate.judge`) calls a `ReferenceTimer` after each trial, with fresh inputs
drawn from that solution's own pool (same seed, same workload, the worker idle); the per-trial medians come back in
the gate's raw result (`interleaved_ms`) and `from_raw` turns them into the row's reference fields, the same fields
`baselines.time_baselines` gives for the references timed after the solutions (several GPUs, `--reference-after`).
"""
from __future__ import annotations

import statistics
from typing import Callable, Iterable

import torch

from .. import definitions
from .config import BenchConfig
from .timing import time_many

PREFIX = "reference:"  # key of a reference's timing: "reference:<source>"
INTERLEAVED, AFTER = "interleaved", "after"  # a row's `reference_timing`
INTERLEAVED_TEXT = "interleaved with each solution's trials (judge process): solution trial 0, reference trial 0, ..."
AFTER_TEXT = "after the solutions, once per workload (judge process)"


def graded_source(sources: Iterable[str]) -> str:
    """The reference the gate grades against among `sources`: the dataset's ("official") when one is active."""
    return definitions.OFFICIAL if definitions.OFFICIAL in set(sources) else definitions.OWN


def reference_calls(references: dict[str, Callable], args: dict, iters: int) -> dict[str, tuple[Callable, int]]:
    """time_many's entries for every reference on one call's inputs: {"reference:<source>": (call, iters)}."""
    return {f"{PREFIX}{source}": (lambda fn=fn: fn(**args), iters) for source, fn in references.items()}


def reference_summary(trials_ms: dict[str, list[float]], source: str) -> dict:
    """A row's reference fields from {source: [median ms per trial]}; `source` is the graded one."""
    mean = statistics.fmean
    ref = list(trials_ms.get(source) or [])
    spread = (max(ref) - min(ref)) / mean(ref) * 100 if len(ref) > 1 and mean(ref) > 0 else None
    return {"reference_latency_ms": mean(ref) if ref else None, "reference_trials_ms": ref,
            "reference_aa_pct": spread,  # the reference's own A/A: spread of its trial medians (host-bound Python)
            "reference_source": source, "references_ms": {s: mean(v) for s, v in trials_ms.items() if v}}


class ReferenceTimer:
    """`between_trials` for one definition on one device: every reference of the definition timed on the drawn
    inputs, {"reference:<source>": median ms} per trial; the timing methods it used are kept in `methods`."""

    def __init__(self, definition: str, device: torch.device | str, config: BenchConfig):
        self.references: dict[str, Callable] = definitions.references(definition)
        self.device, self.config = torch.device(device), config
        self.methods: set[str] = set()

    def __call__(self, trial: int, draw: Callable[[], dict]) -> dict[str, float]:
        args = draw()
        cfg = self.config
        timings = time_many(reference_calls(self.references, args, cfg.reference_iters), self.device,
                            warmup=min(cfg.warmup, 3 if trial == 0 else 1), budget_ms=cfg.budget_ms,
                            min_iters=min(cfg.min_iters, cfg.reference_iters))
        self.methods.update(t.method for t in timings.values())
        return {key: t.median_ms for key, t in timings.items()}


def from_raw(raw: dict) -> dict | None:
    """The row's reference fields from a gate result's interleaved timings; None where there are none to use (the
    judge did not interleave, stopped before a trial's end, or the timing failed: `interleaved_error`)."""
    if raw.get("interleaved_error") or not raw.get("interleaved_ms"):
        return None
    per_source = {key[len(PREFIX):]: list(v) for key, v in raw["interleaved_ms"].items() if key.startswith(PREFIX)}
    source = graded_source(per_source)
    return reference_summary(per_source, source) if per_source.get(source) else None

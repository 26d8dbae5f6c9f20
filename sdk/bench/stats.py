"""Latency statistics from the judge's raw per-call records (never computed in the candidate's process).

Per trial the median over its timed calls; the reported latency is the mean of the trial medians (FlashInfer-Bench
main's reduction). On a GPU the per-call number is the CUPTI span; on a CPU the wall clock. The spread of the trial
medians is the A/A noise: the same solution, the same kind of inputs, timed again.
"""
from __future__ import annotations

import statistics

from .timing import CUPTI, WALL


def latency(calls: list[dict], gpu: bool) -> dict:
    key = "span_ms" if gpu else "wall_ms"
    trials: dict[int, list[float]] = {}
    walls: list[float] = []
    hosts: list[float] = []
    idle: list[float] = []
    for c in calls:
        if c.get("timed") and c.get(key) is not None:
            trials.setdefault(c["trial"], []).append(c[key])
            walls.append(c["wall_ms"])
            if c.get("enqueue_ms") is not None:
                hosts.append(c["enqueue_ms"])
            if gpu and c.get("idle_ms") is not None:
                idle.append(c["idle_ms"])
    if not trials:
        return {"latency_ms": None, "latency_trials_ms": [], "timing_method": None, "aa_noise_pct": None,
                "e2e_ms": None, "host_ms": None, "idle_ms": None, "timed_calls": 0}
    medians = [statistics.median(v) for _, v in sorted(trials.items())]
    mean = statistics.fmean(medians)
    return {"latency_ms": mean, "latency_trials_ms": medians, "timing_method": CUPTI if gpu else WALL,
            "aa_noise_pct": (max(medians) - min(medians)) / mean * 100 if len(medians) > 1 and mean > 0 else None,
            "e2e_ms": statistics.median(walls), "host_ms": statistics.median(hosts) if hosts else None,
            "idle_ms": statistics.median(idle) if idle else None, "timed_calls": sum(len(v) for v in trials.values())}

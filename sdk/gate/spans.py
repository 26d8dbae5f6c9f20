"""GPU spans per annotated call, read from a kineto (torch.profiler) chrome trace: the CUPTI activity records.

A call's span runs from the first to the last kernel / memcpy / memset whose launch API call happened inside the
call's `record_function` annotation. The judge reads the candidate worker's traces with it; the bench's own timer
(reference, peers) uses it too.
"""
from __future__ import annotations

import math

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def _call_intervals(trace: dict, prefix: str) -> dict[str, list[tuple[float, float]]]:
    """{annotation name: its device activities' (start, end) in trace µs} for the annotations starting with
    `prefix` that launched device work, in the order the calls started."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    calls = sorted((e["ts"], e["ts"] + e.get("dur", 0), str(e["name"])) for e in events
                   if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(prefix))
    launches = [(e["ts"], e.get("args", {}).get("correlation")) for e in events if e.get("cat") in LAUNCH_CATS]
    device: dict = {}
    for e in events:
        if e.get("cat") in DEVICE_CATS and (corr := e.get("args", {}).get("correlation")) is not None:
            start, end = device.get(corr, (math.inf, -math.inf))
            device[corr] = (min(start, e["ts"]), max(end, e["ts"] + e.get("dur", 0)))
    out = {}
    for begin, finish, name in calls:
        hits = [device[c] for ts, c in launches if begin <= ts <= finish and c in device]
        if hits:
            out[name] = hits
    return out


def _span_ms(hits: list[tuple[float, float]]) -> float:
    return (max(h[1] for h in hits) - min(h[0] for h in hits)) / 1e3  # trace times are µs


def _idle_ms(hits: list[tuple[float, float]]) -> float:
    """The span minus the union of the activities (overlapping ones, as programmatic dependent launch makes them,
    count once)."""
    busy, reach = 0.0, -math.inf
    for start, end in sorted(hits):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return (reach - min(h[0] for h in hits) - busy) / 1e3


def annotated_spans(trace: dict, prefix: str) -> dict[str, float]:
    """{annotation name: span ms} for the annotations starting with `prefix` that launched device work, in the
    order the calls started; an annotation without device activity is absent."""
    return {name: _span_ms(hits) for name, hits in _call_intervals(trace, prefix).items()}


def annotated_span_idle(trace: dict, prefix: str) -> dict[str, tuple[float, float]]:
    """{annotation name: (span ms, idle ms)}, one pass over the trace. Idle is the part of the span in which none
    of the call's device activities ran: the GPU waiting for the host's next launch (or a call idling on purpose),
    which a faster kernel does not shorten."""
    return {name: (_span_ms(hits), _idle_ms(hits)) for name, hits in _call_intervals(trace, prefix).items()}

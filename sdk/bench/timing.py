"""Latency of one call, the way FlashInfer-Bench main measures it.

Per call: the GPU span from the first to the last kernel / memcpy / memset whose launch API call happened inside
the call (CUPTI activity records, collected here through torch.profiler's kineto backend and read from its
trace), with L2 flushed before every call by zeroing a buffer of twice the L2 size, no CUDA graph, no argument
cloning; warmup calls first; the median over the timed calls is the trial's latency. CUDA events around each
call (launch overhead included) are the labelled fallback when the profiler yields no device activity.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..gate.plan import sized_iters
from ..gate.spans import annotated_spans

CUPTI = "cupti-span (torch.profiler/kineto), cold L2, no CUDA graph"
EVENTS = "cuda-events (fallback: includes launch overhead), cold L2, no CUDA graph"
WALL = "wall-clock (cpu device)"


@dataclass
class Timing:
    median_ms: float
    samples_ms: list[float] = field(repr=False)
    method: str


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 32 << 20
    return torch.empty(2 * l2, dtype=torch.uint8, device=device)


def spans_from_trace(trace: dict, marker: str) -> list[float]:
    """Per annotated call `<marker><i>` that launched device work: its GPU span (ms), in call order."""
    return list(annotated_spans(trace, marker).values())


def _time_cupti(fns: dict[str, tuple[Callable, int]], flush: torch.Tensor) -> dict[str, list[float]]:
    """One profiler session for several callables (profiler start/stop and trace export cost more than the calls)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for key, (fn, iters) in fns.items():
            for i in range(iters):
                flush.zero_()
                with record_function(f"fib-sdk-call-{key}-#{i}"):
                    fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.unlink(path)
    return {key: spans_from_trace(trace, f"fib-sdk-call-{key}-#") for key in fns}


def _time_events(fn: Callable, flush: torch.Tensor, iters: int) -> list[float]:
    out = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return out


def time_many(fns: dict[str, tuple[Callable, int]], device: torch.device | str, *, warmup: int = 10,
              method: str = "cupti", budget_ms: float | None = None, min_iters: int = 10) -> dict[str, Timing]:
    """Time several callables, each `iters` times (key -> (fn, iters)), every call after an L2 flush; with
    `budget_ms`, each one's iters shrinks to what fits the budget at its last warmup call's wall time."""
    device = torch.device(device)
    if device.type != "cuda":
        out = {}
        for key, (fn, iters) in fns.items():
            for _ in range(max(1, min(warmup, 2))):
                start = time.perf_counter()
                fn()
                call_ms = (time.perf_counter() - start) * 1e3
            iters = sized_iters(call_ms, iters, budget_ms, min_iters)
            samples = []
            for _ in range(iters):
                t = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t) * 1e3)
            out[key] = Timing(statistics.median(samples), samples, WALL)
        return out
    flush = l2_flush_buffer(device)
    sized = {}
    for key, (fn, iters) in fns.items():
        for _ in range(warmup):
            flush.zero_()
            fn()
        flush.zero_()
        torch.cuda.synchronize()
        start = time.perf_counter()  # the last warmup call, timed on the host, sizes the timed calls
        fn()
        torch.cuda.synchronize()
        sized[key] = (fn, sized_iters((time.perf_counter() - start) * 1e3, iters, budget_ms, min_iters))
    fns = sized
    spans = _time_cupti(fns, flush) if method == "cupti" else {}
    out = {}
    for key, (fn, iters) in fns.items():
        samples = spans.get(key, [])
        if len(samples) == iters:
            out[key] = Timing(statistics.median(samples), samples, CUPTI)
        else:  # no device activity seen through the profiler: labelled fallback
            samples = _time_events(fn, flush, iters)
            out[key] = Timing(statistics.median(samples), samples, EVENTS)
    return out


def time_call(fn: Callable, device: torch.device | str, *, warmup: int = 10, iters: int = 50,
              method: str = "cupti") -> Timing:
    return time_many({"call": (fn, iters)}, device, warmup=warmup, method=method)["call"]

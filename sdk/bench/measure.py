"""Timing of one gate-PASSED solution on one workload, inside the solution's worker process.

Timing inputs are fresh draws (trial numbers past the gate's), so correctness and timing never share tensors or
pointers. Per trial: the candidate (median of `iters`), optionally again (A/A noise), the reference and each
peer on the same inputs; the reported latency is the mean over trials of the medians. Peers are checked with
the same rule as candidates before their time counts.
"""
from __future__ import annotations

import statistics
from typing import Callable

import torch

from .. import definitions, inputs as inputs_mod
from .._fib import Definition, Solution, Workload
from ..gate.compare import Tolerance, check
from ..gate.evaluate import as_tuple
from . import floors
from .timing import time_call

TIMING_TRIAL_BASE = 1000  # timing trials draw inputs the gate never saw


def _call(fn: Callable, solution: Solution, definition: Definition, workload: Workload, args: dict, device):
    if solution.spec.destination_passing_style:
        outs = inputs_mod.alloc_outputs(definition, workload, device, poison=False)
        return lambda: fn(*args.values(), *outs.values())
    return lambda: fn(*args.values())


def measure(fn: Callable, solution: Solution, definition: Definition, workload: Workload, *, trials: int,
            seed: int, device: str, warmup: int, iters: int, method: str, reference: bool, aa: bool,
            peers: list[str], tol: Tolerance) -> dict:
    dev = torch.device(device)
    ref_fn = definitions.reference(definition.name)
    ours, again, ref, methods = [], [], [], set()
    peer_lat: dict[str, list[float]] = {}
    peer_status: dict[str, dict] = {}
    work = None
    chosen = []
    if peers:
        from .. import peers as peer_mod

        chosen = [p for p in peer_mod.peers_for(definition.name) if p.name in peers]
    for t in range(trials):
        args = inputs_mod.make_inputs(definition, workload, seed=seed, trial=TIMING_TRIAL_BASE + t, device=dev)
        if work is None:
            work = floors.work(definition.name, args).as_dict()
        timing = time_call(_call(fn, solution, definition, workload, args, dev), dev, warmup=warmup, iters=iters,
                           method=method)
        ours.append(timing.median_ms)
        methods.add(timing.method)
        if aa:
            again.append(time_call(_call(fn, solution, definition, workload, args, dev), dev, warmup=warmup,
                                   iters=iters, method=method).median_ms)
        ref_out = None
        if reference or chosen:
            ref_out = as_tuple(ref_fn(**args))
        if reference:
            ref.append(time_call(lambda: ref_fn(**args), dev, warmup=min(warmup, 3), iters=iters,
                                 method=method).median_ms)
        for peer in chosen:
            state = peer_status.setdefault(peer.name, {"status": "PASSED", "reason": "",
                                                        "cuda_graph": peer.uses_cuda_graph})
            if state["status"] != "PASSED":
                continue
            try:
                ok, why = peer.available()
                if not ok:
                    state.update(status="UNAVAILABLE", reason=why)
                    continue
                call = peer.prepare(args)
                result = check(definition.name, list(definition.outputs), as_tuple(call()), ref_out, tol, args)
                if not result.passed:
                    state.update(status=result.status, reason=result.reason)
                    continue
                peer_lat.setdefault(peer.name, []).append(time_call(call, dev, warmup=warmup, iters=iters,
                                                                    method=method).median_ms)
            except Exception as exc:
                state.update(status="RUNTIME_ERROR", reason=f"{type(exc).__name__}: {str(exc)[:200]}")
        del args, ref_out
    mean = statistics.fmean
    result = {"latency_ms": mean(ours), "latency_trials_ms": ours, "timing_method": " + ".join(sorted(methods)),
              "reference_latency_ms": mean(ref) if ref else None, "work": work, "peers": {}}
    if again:
        result["aa_noise_pct"] = abs(mean(again) - mean(ours)) / mean(ours) * 100.0
    for name, state in peer_status.items():
        lat = peer_lat.get(name)
        result["peers"][name] = {"latency_ms": mean(lat) if lat and state["status"] == "PASSED" else None, **state}
    return result

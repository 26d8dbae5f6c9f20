"""Timing of one gate-PASSED solution on one workload, inside the solution's worker process.

Timing inputs are fresh draws (trial numbers past the gate's), so correctness and timing never share tensors or
pointers. Per trial: the candidate (median of `iters`), optionally again (A/A noise), the reference and each
peer on the same inputs; the reported latency is the mean over trials of the medians. Peers are checked with
the same rule as candidates before their time counts.

After the timed calls, a probe: fresh values written into the very tensors that were timed (same objects, same
addresses), outputs poisoned again, one call, checked against the reference. A solution that started caching
only after the gate's few calls (keyed on identity or data_ptr) fails it, as does one that left a thread running
or replaced a timer; the result then carries `rejected` and the gate result fails.

A solution module that declares `FIB_DECLARED_CACHE = "<why>"` (and `fib_cache_clear()`, see sdk.gate.scan) is
also timed cold, with fib_cache_clear() before every call: `cold_latency_ms` beside the warm `latency_ms`.
"""
from __future__ import annotations

import functools
import statistics
import sys
from typing import Callable

import torch

from .. import definitions, inputs as inputs_mod
from .._fib import Definition, Solution, Workload
from ..gate import guards
from ..gate.compare import Tolerance, check
from ..gate.evaluate import as_tuple, reuse_storage, run_candidate, synchronize
from . import floors
from .timing import time_many

TIMING_TRIAL_BASE = 1000  # timing trials draw inputs the gate never saw
PROBE_TRIAL = 1999  # the post-timing probe's values
PROBE = "after timing, the timed tensors with new values"


def _call(fn: Callable, solution: Solution, definition: Definition, workload: Workload, args: dict, device):
    """A no-argument call of the candidate on `args`; its DPS output buffers (or None) ride along as `.outs`."""
    outs = inputs_mod.alloc_outputs(definition, workload, device, poison=False) \
        if solution.spec.destination_passing_style else None

    def call():
        return fn(*args.values(), *outs.values()) if outs is not None else fn(*args.values())

    call.outs = outs
    return call


def _cold(clear: Callable, call: Callable):
    clear()
    return call()


def declared_cache(fn: Callable) -> tuple[str | None, Callable | None]:
    """(FIB_DECLARED_CACHE, fib_cache_clear) of the module defining `fn`; (None, None) without a declaration."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    reason = getattr(module, "FIB_DECLARED_CACHE", None)
    if not isinstance(reason, str) or not reason.strip():
        return None, None
    clear = getattr(module, "fib_cache_clear", None)
    return reason, clear if callable(clear) else None


def probe(fn: Callable, solution: Solution, definition: Definition, workload: Workload, args: dict,
          outs: dict | None, *, seed: int, device: torch.device, tol: Tolerance, threads: int) -> dict | None:
    """One checked call on fresh values in the timed tensors; {"status", "reason"} when it fails, else None."""
    fresh = inputs_mod.make_inputs(definition, workload, seed=seed, trial=PROBE_TRIAL, device=device)
    args = reuse_storage(args, fresh)
    pristine = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    try:
        got, _ = run_candidate(fn, solution, definition, workload, args, device, outs)
    except Exception as exc:
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    else:
        synchronize(device)
        why = "the solution left thread(s) running after it returned (deferred work)" \
            if guards.live_threads() > threads else guards.describe(patched) if (patched := guards.tampered()) else ""
    if why:
        return {"status": "RUNTIME_ERROR", "reason": f"{PROBE}: {why}"}
    ref_out = as_tuple(definitions.reference(definition.name)(**pristine))
    result = check(definition.name, list(definition.outputs), got, ref_out, tol, pristine)
    return None if result.passed else {"status": result.status, "reason": f"{PROBE}: {result.reason}"}


def measure(fn: Callable, solution: Solution, definition: Definition, workload: Workload, *, trials: int,
            seed: int, device: str, warmup: int, iters: int, method: str, reference: bool, aa: bool,
            peers: list[str], tol: Tolerance, reference_iters: int = 10) -> dict:
    dev = torch.device(device)
    ref_fn = definitions.reference(definition.name)
    samples: dict[str, list[float]] = {}
    methods: set[str] = set()
    peer_state: dict[str, dict] = {}
    work = None
    chosen = []
    threads = guards.live_threads()
    cache_reason, cache_clear = declared_cache(fn)
    if peers:
        from .. import peers as peer_mod

        chosen = [p for p in peer_mod.peers_for(definition.name) if p.name in peers]
    for t in range(trials):
        args = inputs_mod.make_inputs(definition, workload, seed=seed, trial=TIMING_TRIAL_BASE + t, device=dev)
        if work is None:
            work = floors.work(definition.name, args).as_dict()
        calls = {"ours": (_call(fn, solution, definition, workload, args, dev), iters)}
        if aa:
            calls["ours-again"] = (_call(fn, solution, definition, workload, args, dev), iters)
        if cache_clear is not None:  # a declared cache, timed empty: fib_cache_clear() (host-only work) every call
            calls["ours-cold"] = (functools.partial(_cold, cache_clear, calls["ours"][0]), iters)
        if reference:
            calls["reference"] = (functools.partial(ref_fn, **args), reference_iters)
        ref_out = as_tuple(ref_fn(**args)) if chosen else None
        for peer in chosen:
            state = peer_state.setdefault(peer.name, {"status": "PASSED", "reason": "",
                                                      "cuda_graph": peer.uses_cuda_graph})
            if state["status"] != "PASSED":
                continue
            try:
                ok, why = peer.available()
                if not ok:
                    state.update(status="UNAVAILABLE", reason=why)
                    continue
                call = peer.prepare(args)  # layout conversions: outside the timed region
                result = check(definition.name, list(definition.outputs), as_tuple(call()), ref_out, tol, args)
                if not result.passed:  # a peer's time counts only when it passes the same gate
                    state.update(status=result.status, reason=f"trial {t}: {result.reason}")
                    continue
                calls[f"peer:{peer.name}"] = (call, iters)
            except Exception as exc:
                state.update(status="RUNTIME_ERROR", reason=f"{type(exc).__name__}: {str(exc)[:200]}")
        try:
            timings = time_many(calls, dev, warmup=warmup, method=method)
        except Exception as exc:  # a peer that breaks during timing must not cost our own numbers
            bad = [k for k in calls if k.startswith("peer:")]
            if not bad:
                raise
            for key in bad:
                peer_state[key[5:]].update(status="RUNTIME_ERROR", reason=f"timing: {type(exc).__name__}: {exc}"[:200])
                calls.pop(key)
            timings = time_many(calls, dev, warmup=warmup, method=method)
        for key, timing in timings.items():
            samples.setdefault(key, []).append(timing.median_ms)
            if not key.startswith("peer:"):
                methods.add(timing.method)
        last = (args, calls["ours"][0].outs)  # the post-timing probe reuses these very tensors
        del args, ref_out, calls
    mean = statistics.fmean
    result = {"latency_ms": mean(samples["ours"]), "latency_trials_ms": samples["ours"],
              "timing_method": " + ".join(sorted(methods)), "iters": iters, "warmup": warmup,
              "reference_iters": reference_iters if reference else None,
              "reference_latency_ms": mean(samples["reference"]) if "reference" in samples else None,
              "work": work, "peers": {}}
    if "ours-again" in samples:
        result["aa_noise_pct"] = abs(mean(samples["ours-again"]) - result["latency_ms"]) / result["latency_ms"] * 100
    if cache_reason is not None:
        result.update(declared_cache=cache_reason, warm_latency_ms=result["latency_ms"],
                      cold_latency_ms=mean(samples["ours-cold"]) if "ours-cold" in samples else None)
        if cache_clear is None:
            result["rejected"] = {"status": "RUNTIME_ERROR", "reason": "FIB_DECLARED_CACHE without a callable "
                                  "fib_cache_clear(): the cold path cannot be timed"}
    failed = probe(fn, solution, definition, workload, *last, seed=seed, device=dev, tol=tol, threads=threads) \
        if trials and "rejected" not in result else None
    if failed:
        result["rejected"] = failed
    for name, state in peer_state.items():
        lat = samples.get(f"peer:{name}")
        result["peers"][name] = {"latency_ms": mean(lat) if lat and state["status"] == "PASSED" else None, **state}
    return result

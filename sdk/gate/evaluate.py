"""Evaluate one solution on one workload, in the current process: the strict layer over FlashInfer-Bench's rules.

Per trial: fresh seeded inputs; the candidate runs first, so no reference result exists yet that freed memory
could hand it, and gets poisoned output buffers (NaN / INT_MIN) in destination-passing style; a device-wide
synchronize follows the call; the call must leave no thread running and no torch/time function replaced
(`guards`); its inputs must be bit-for-bit unchanged; then the reference runs on its own clones and outputs are
checked with the definition's rule. Odd trials put their fresh values into the previous trial's input and output
tensors (same objects, same addresses), so a cache keyed on identity or data_ptr returns a stale result. A
candidate whose outputs repeat exactly across trials while the reference's change is caching, and fails.
"""
from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import definitions, inputs as inputs_mod
from .._fib import Definition, Solution, Workload
from . import guards
from .compare import Check, Tolerance, check


@dataclass
class TrialStats:
    max_abs: float = 0.0
    max_rel: float = 0.0
    extra: dict = field(default_factory=dict)
    latency_ms: list = field(default_factory=list)
    reference_latency_ms: list = field(default_factory=list)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()  # device-wide: work left on side streams is waited for, and counted


def as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _bytes_of(value: Any) -> bytes | Any:
    if isinstance(value, torch.Tensor):
        t = value.detach()
        return t.contiguous().view(torch.uint8) if t.numel() else t  # bitwise: NaN-safe, fp8-safe
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and \
            torch.equal(_bytes_of(a), _bytes_of(b))
    return a == b


def _clone(values: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def _digest(outs) -> str:
    h = hashlib.sha256()
    for t in outs:
        if isinstance(t, torch.Tensor):
            h.update(_bytes_of(t).cpu().numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _reference_outputs(reference: Callable, inputs: dict) -> tuple:
    return as_tuple(reference(**_clone(inputs)))  # on its own clones: nothing it does reaches the candidate's


def _timed(fn: Callable, device: torch.device):
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, (time.perf_counter() - start) * 1e3


def reuse_storage(old: dict, new: dict) -> dict:
    """`new`'s values written into `old`'s tensors (same objects and addresses); scalars taken from `new`."""
    return {k: old[k].copy_(v) if isinstance(v, torch.Tensor) and isinstance(old.get(k), torch.Tensor) and
            old[k].shape == v.shape and old[k].dtype == v.dtype else v for k, v in new.items()}


def poison(outs: dict) -> dict:
    for t in outs.values():
        t.fill_(inputs_mod.poison_value(t.dtype))
    return outs


def run_candidate(fn: Callable, solution: Solution, definition: Definition, workload: Workload,
                  args: dict, device: torch.device, outs: dict | None = None):
    """Call the candidate on `args` (DPS with poisoned outputs, or value-returning); returns (outputs, ms).
    `outs`: DPS buffers to reuse (poisoned again here); fresh ones by default."""
    if solution.spec.destination_passing_style:
        outs = poison(outs) if outs is not None else inputs_mod.alloc_outputs(definition, workload, device)
        _, ms = _timed(lambda: fn(*args.values(), *outs.values()), device)
        return tuple(outs.values()), ms
    result, ms = _timed(lambda: fn(*args.values()), device)
    return as_tuple(result), ms


def evaluate(fn: Callable, solution: Solution, definition: Definition, workload: Workload, *, trials: int = 3,
             seed: int = 0, device: str | torch.device = "cpu", tol: Tolerance = Tolerance()) -> tuple[Check, TrialStats]:
    device = torch.device(device)
    reference = definitions.reference(definition.name)
    names = list(definition.outputs)
    stats = TrialStats()
    digests: list[tuple[str, str]] = []
    previous: tuple[dict, dict | None] | None = None  # the last trial's (inputs, DPS outputs), for address reuse
    for trial in range(trials):
        given = inputs_mod.make_inputs(definition, workload, seed=seed, trial=trial, device=device)
        reused = None
        if trial % 2 == 1 and previous is not None:
            given, reused = reuse_storage(previous[0], given), previous[1]
        previous = None
        pristine = _clone(given)
        threads = guards.live_threads()
        try:
            outs, ms = run_candidate(fn, solution, definition, workload, given, device, reused)
        except Exception as exc:  # the candidate's own failure
            return Check("RUNTIME_ERROR", f"trial {trial}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"), stats
        if guards.live_threads() > threads:
            return Check("RUNTIME_ERROR", f"trial {trial}: the solution left {guards.live_threads() - threads} "
                         "thread(s) running after it returned (deferred work)"), stats
        if (patched := guards.tampered()):
            return Check("RUNTIME_ERROR", f"trial {trial}: {guards.describe(patched)}"), stats
        ref_out, ref_ms = _timed(functools.partial(_reference_outputs, reference, pristine), device)
        changed = [k for k in given if not _same(given[k], pristine[k])]
        if changed:
            return Check("RUNTIME_ERROR", f"trial {trial}: the solution modified its input(s) {changed}"), stats
        if len(outs) != len(names):
            return Check("RUNTIME_ERROR", f"trial {trial}: returned {len(outs)} outputs, expected {len(names)}"), stats
        result = check(definition.name, names, outs, ref_out, tol, pristine)
        if not result.passed:
            result.reason = f"trial {trial}: {result.reason}"
            return result, stats
        digests.append((_digest(outs), _digest(ref_out)))
        stats.max_abs, stats.max_rel = max(stats.max_abs, result.max_abs), max(stats.max_rel, result.max_rel)
        for key, value in result.extra.items():
            if isinstance(value, float) and "ratio" in key:
                stats.extra[key] = min(stats.extra.get(key, value), value)
            else:
                stats.extra[key] = value
        stats.latency_ms.append(ms)
        stats.reference_latency_ms.append(ref_ms)
        if trial % 2 == 0:  # the next trial reuses these tensors
            previous = (given, dict(zip(names, outs)) if solution.spec.destination_passing_style else None)
        del given, pristine, outs, ref_out
    if len(digests) > 1 and len({d for d, _ in digests}) == 1 and len({r for _, r in digests}) > 1:
        return Check("INCORRECT_NUMERICAL", "outputs repeat exactly across trials with different inputs "
                     "(cached result?)", stats.max_abs, stats.max_rel, stats.extra), stats
    return Check("PASSED", "", stats.max_abs, stats.max_rel, stats.extra), stats

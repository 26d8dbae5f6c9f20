"""The judge: one workload of one solution, driven from a process that never imports the candidate's code.

The judge draws every call's inputs (`pool`), hands them to the candidate's worker over CUDA IPC or shared memory,
and after each call decides, with its own OS-seeded randomness, whether to check that call: the candidate cannot
know whether a call is checked, timed, or both, because every call is the same call (fresh inputs, poisoned
outputs, the profiler in the same state for the whole trial). A checked call's inputs are compared with the judge's
private copy (any change is a RUNTIME_ERROR), its outputs copied, and the reference run on the private copy; the
verdict is the contest's rule plus the strict verdict. The reference, the comparison and the statistics all live
here, so nothing the candidate does to its own interpreter reaches them.

Order: trial 0's calls (profiler on, then its trace collected), then, with `between_trials`, the caller's own work
on fresh inputs drawn from the same pool (the bench times the references there, so each solution trial has a
reference trial beside it: solution 0, reference 0, solution 1, reference 1, ...), then trial 1, and so on. The
worker is idle meanwhile and is told nothing; a failure of that work is recorded, never the solution's.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import definitions
from .._fib import Definition, Solution, Workload
from . import strict as strict_mod
from .compare import Check, Tolerance, check
from .plan import CallPlan
from .pool import Call, InputPool, clone
from .spans import annotated_span_idle

CALL_PREFIX = "fib-call-#"

# between_trials(trial, draw) -> {key: median ms}: the caller's work after each trial; draw() gives fresh inputs.
BetweenTrials = Callable[[int, Callable[[], dict]], dict[str, float]]
# call_work(inputs) -> {name: number}: the caller's measure of one timed call's inputs (the bench: the bytes and
# FLOPs that call must move), recorded with the call as "work"; it reads the judge's private copy, never changes it.
CallWork = Callable[[dict], dict[str, float]]


class WorkerFailure(Exception):
    """The worker died, hung, or refused a request: `raw` is the status dict to report."""

    def __init__(self, raw: dict):
        super().__init__(raw.get("reason", ""))
        self.raw = raw


def os_threads(pid: int) -> int | None:
    """Threads of `pid` as the OS counts them (all of them, `_thread` and native ones too); None off Linux."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


@dataclass
class Outcome:
    check: Check
    strict: tuple[bool, str] = (True, "")
    calls: list[dict] = field(default_factory=list)         # per call: index, trial, timed, wall_ms, enqueue_ms, checked, span_ms, idle_ms
    reference_ms: list[float] = field(default_factory=list)  # wall time of the reference on checked calls
    setup_ms: list[float] = field(default_factory=list)
    checked: int = 0
    log: str = ""
    interleaved: list[dict[str, float]] = field(default_factory=list)  # per trial: what between_trials returned
    interleaved_error: str | None = None  # the first failure of between_trials (it is not called again)
    call_work_error: str | None = None    # the first failure of call_work (it is not called again)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def check_call(definition: Definition, pool: InputPool, call: Call, tol: Tolerance, reference: Callable,
               device: torch.device) -> tuple[Check, float]:
    """The contest check of one call's outputs against the reference on the judge's private inputs."""
    outs = pool.output_copy(call)  # first: what a lingering thread writes after the reply must not count
    if (changed := pool.modified_inputs(call)):
        return Check("RUNTIME_ERROR", f"the solution modified its input(s) {changed}"), 0.0
    inputs = pool.private(call)
    _sync(device)
    start = time.perf_counter()
    ref = as_tuple(reference(**clone(inputs)))
    _sync(device)
    ref_ms = (time.perf_counter() - start) * 1e3
    return check(definition.name, list(definition.outputs), outs, ref, tol, inputs), ref_ms


def call_span_idle(trace: dict) -> dict[int, tuple[float, float]]:
    """Per call index: (GPU span, the ms of it in which none of the call's device work ran), one pass."""
    return {int(name[len(CALL_PREFIX):]): v for name, v in annotated_span_idle(trace, CALL_PREFIX).items()}


def judge(ask: Callable[[dict], dict], pid: int, solution: Solution, definition: Definition, workload: Workload, *,
          plan: CallPlan, seed: int, tol: Tolerance, device: torch.device, has_setup: bool,
          fresh_worker: bool, between_trials: BetweenTrials | None = None,
          call_work: CallWork | None = None) -> Outcome:
    """Run `plan` for one workload through `ask` (one request to the worker, raising WorkerFailure). With
    `between_trials`, after each trial (its trace collected, the worker idle) `between_trials(trial, draw)` runs in
    this process; `draw()` returns a copy of the judge's private inputs of a fresh call from the pool. With
    `call_work`, every timed call's record gets call_work(its private inputs) as "work", once the call returned:
    a timed call's latency can then be put beside the work of the same inputs, not of other draws."""
    reference = definitions.reference(definition.name)
    pool = InputPool(definition, workload, seed, device, slots=2, sets=plan.resident_sets(device),
                     fixed_integers=has_setup)
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))  # which calls are checked: unknowable in advance
    out = Outcome(Check("PASSED", extra={"matched_ratio": 1.0}))
    logs = []

    def fail(status: str, reason: str, failed: Check | None = None) -> Outcome:
        base = failed or out.check
        out.check = Check(status, reason, base.max_abs, base.max_rel, base.extra)
        out.log = "".join(logs)
        return out

    slots = [({n: pool.shared_light[s][n] for n in pool.light}, pool.outputs[s]) for s in range(pool.slots)]
    bound = ask({"op": "bind", "slots": slots, "sets": pool.shared_resident})
    out.setup_ms = bound.get("setup_ms", [])
    try:
        for trial in range(plan.trials):
            warmup, n_calls = plan.warmup, plan.calls_per_trial
            p_check = plan.check_probability
            if plan.profile and device.type == "cuda":
                ask({"op": "profile", "on": True})
            trial_calls = []
            k = -1
            while k + 1 < n_calls:
                k += 1
                call = pool.next_call()
                before = os_threads(pid)
                reply = ask({"op": "call", "slot": call.slot, "set": call.set, "index": call.index})
                after = os_threads(pid)
                logs.append(reply.get("log", ""))
                where = f"trial {trial}" + (f" call {k}" if n_calls > 1 else "")
                if reply.get("status"):
                    return fail(reply["status"], f"{where}: {reply.get('reason', '')}")
                first = fresh_worker and trial == 0 and k == 0  # lazy runtime threads may start on a first call
                if reply["threads"] > 0 or (not first and before is not None and after is not None and after > before):
                    return fail("RUNTIME_ERROR", f"{where}: the solution left thread(s) running after it returned "
                                "(deferred work)")
                if reply["tampered"]:
                    return fail("RUNTIME_ERROR", f"{where}: the solution replaced or changed "
                                f"{', '.join(reply['tampered'][:3])} (monkey-patching / global settings are not "
                                "allowed)")
                if reply.get("returned"):
                    return fail(reply.get("returned_status", "RUNTIME_ERROR"), f"{where}: {reply['returned']}")
                if k == 1 and plan.budget_ms is not None:
                    # Size the trial on its second call (the first may JIT) before that call's check is drawn; the
                    # two calls it was sized on are warmup whatever the plan says (a call that sets its own trial's
                    # length is never a timed one), and the rest are checked at the sized trial's rate.
                    warmup, iters = plan.sized(reply["wall_ns"] / 1e6)
                    n_calls = warmup + iters
                    p_check = plan.check_probability_for(n_calls)
                    for earlier in trial_calls:
                        earlier["timed"] = False
                enqueue = reply.get("enqueue_ns")
                record = {"index": call.index, "trial": trial, "timed": k >= warmup,
                          "wall_ms": reply["wall_ns"] / 1e6, "enqueue_ms": None if enqueue is None else enqueue / 1e6,
                          "checked": k == 0 or rng.random() < p_check}
                if record["checked"]:
                    result, ref_ms = check_call(definition, pool, call, tol, reference, device)
                    out.reference_ms.append(ref_ms)
                    out.checked += 1
                    if not result.passed:
                        timed = " (a timed call)" if record["timed"] and plan.profile else ""
                        return fail(result.status, f"{where}{timed}: {result.reason}", result)
                    passed, why = strict_mod.verdict(definition.name, result)
                    if not passed and out.strict[0]:
                        out.strict = (False, f"{where}: {why}")
                    _merge(out.check, result)
                if call_work is not None and record["timed"] and out.call_work_error is None:
                    _record_work(call_work, pool.private(call), record, out)
                trial_calls.append(record)
            if plan.profile and device.type == "cuda":
                trace = ask({"op": "profile", "on": False}).get("trace")
                measured = call_span_idle(json.loads(trace)) if trace else {}
                for record in trial_calls:
                    record["span_ms"], record["idle_ms"] = measured.get(record["index"], (None, None))
                    if record["timed"] and record["span_ms"] is None:
                        return fail("RUNTIME_ERROR", f"trial {trial}: timing: call {record['index']} launched no "
                                    "device work inside the call (work the timer cannot see)")
            out.calls.extend(trial_calls)
            if between_trials is not None and out.interleaved_error is None:
                _between(between_trials, trial, pool, out)
    finally:
        try:
            ask({"op": "unbind"})
        except WorkerFailure:
            pass
    out.log = "".join(logs)
    return out


def _between(between_trials: BetweenTrials, trial: int, pool: InputPool, out: Outcome) -> None:
    """One call of the caller's work between trials; its failure is recorded once and ends it for this workload.
    The inputs are a clone of the private copy: nothing it does reaches the copy the solution is checked against."""
    try:
        got = between_trials(trial, lambda: clone(pool.private(pool.next_call())))
        out.interleaved.append({str(key): float(ms) for key, ms in got.items()})
    except Exception as exc:  # noqa: BLE001 - trusted work of the caller, but never the solution's failure
        out.interleaved_error = f"trial {trial}: {type(exc).__name__}: {str(exc)[:300]}"


def _record_work(call_work: CallWork, inputs: dict, record: dict, out: Outcome) -> None:
    """record["work"] of a timed call; a failure is recorded once and ends it for this workload, never the
    solution's failure."""
    try:
        record["work"] = {str(k): float(v) for k, v in call_work(inputs).items()}
    except Exception as exc:  # noqa: BLE001 - trusted work of the caller
        out.call_work_error = f"call {record['index']}: {type(exc).__name__}: {str(exc)[:300]}"


def _merge(total: Check, one: Check) -> None:
    total.max_abs, total.max_rel = max(total.max_abs, one.max_abs), max(total.max_rel, one.max_rel)
    for key, value in one.extra.items():
        if isinstance(value, float) and "ratio" in key:
            total.extra[key] = min(total.extra.get(key, value), value)
        elif isinstance(value, float) and key.endswith("rel_l2"):
            total.extra[key] = max(total.extra.get(key, value), value)
        else:
            total.extra[key] = value

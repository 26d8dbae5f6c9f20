"""The reference(s), the peers and the probe, timed once per workload in the judge's process, on the same inputs.

They are trusted code (the definition's reference, published libraries), so they run here and not in a candidate's
worker; each trial draws fresh calls from the same input pool the solutions see (same seed, same workload): the
references and the probe time the trial's first draw, a peer's timed calls cycle through `peer_draws` of them (as
a solution's calls each see a new draw: one draw per trial would give a peer whose work follows the routing that
draw's time alone), and a peer's time counts only when its outputs pass the same contest rule on every draw. Which process measured them is
recorded in the results (`environment.baselines`): no solution hosts them. This runs after the solutions' gate;
where the bench interleaves the references with each solution's trials (`interleave`, one device), it times only
the peers, the probe and the floors' work here (`time_references=False`).
"""
from __future__ import annotations

import itertools
import statistics
import time

import torch

from .. import definitions
from .._fib import Definition, Workload
from ..gate.compare import Tolerance, check
from ..gate.judge import as_tuple
from ..gate.pool import InputPool
from . import floors
from .interleave import PREFIX, graded_source, reference_calls, reference_summary
from .config import BenchConfig
from .timing import time_many

HOST = "judge process: reference and peers on the solutions' input pool (same seed), not inside any solution"


def time_baselines(definition: Definition, workload: Workload, *, seed: int, config: BenchConfig, device: str,
                   peer_names: list[str], tol: Tolerance, time_references: bool = True) -> dict:
    """Per trial one fresh call: the references (with `time_references` and `config.reference`), the peers and the
    probe timed on it, and the floors' work counted."""
    began = time.perf_counter()
    dev = torch.device(device)
    ref_fn = definitions.reference(definition.name)  # what the gate grades against (the dataset's when active)
    every_ref = definitions.references(definition.name)  # both, when both exist
    timed_refs = every_ref if config.reference and time_references else {}
    chosen = []
    if peer_names:
        from .. import peers as peer_mod

        chosen = [p for p in peer_mod.peers_for(definition.name) if p.name in peer_names]
    draws = config.peer_draws if chosen else 1
    pool = InputPool(definition, workload, seed, dev, slots=draws, sets=1)  # a trial's draws are alive together
    state = {p.name: {"status": "PASSED", "reason": "", "cuda_graph": p.uses_cuda_graph, "draws_per_trial": draws}
             for p in chosen}
    samples: dict[str, list[float]] = {}
    works: list[floors.Work] = []  # per trial, like the probe's bytes: the row's floor is their mean
    probe_error = None
    probe_trials: list[dict] = []  # per trial: each draws its own call, so its routing (MoE) and its bytes differ
    copy_pair: list[torch.Tensor] = []  # the same-size copy's two buffers, grown to the largest trial's bytes
    for trial in range(config.trials):
        drawn = [pool.private(pool.next_call()) for _ in range(draws)]  # the resident set as the last call left it
        args = drawn[0]
        works.append(floors.work(definition.name, args))
        calls = reference_calls(timed_refs, args, config.reference_iters)
        if dev.type == "cuda":  # the measured bound: one launch that reads only the bytes the workload must read
            try:
                from . import probe as bandwidth_probe

                candidates = bandwidth_probe.prepare_candidates(definition.name, args)
                # A device copy moving as many bytes (half read, half written), timed alongside: what the probe's
                # bandwidth is put against (`pct_of_copy`). Its buffers first: if they cannot be had, no probe
                # kernel is timed either (no bound beside an error).
                half = (candidates[0].plan.read_bytes + candidates[0].plan.write_bytes + 1) // 2
                if not copy_pair or copy_pair[0].numel() < half:
                    copy_pair[:] = [torch.empty(half, dtype=torch.uint8, device=dev) for _ in range(2)]
                src, dst = copy_pair[0][:half], copy_pair[1][:half]
                for ready in candidates:
                    calls[f"probe:{ready.variant}"] = (ready.launch, config.iters)
                infos = {ready.variant: ready.info() for ready in candidates}  # the same bytes and path; own table
                calls["copy:probe"] = (lambda s=src, d=dst: d.copy_(s), config.iters)
            except Exception as exc:  # noqa: BLE001 - reported; the row then has no bound
                probe_error = f"{type(exc).__name__}: {str(exc)[:200]}"
        ref_outs = [as_tuple(ref_fn(**d)) for d in drawn] if chosen else []
        for peer in chosen:
            if state[peer.name]["status"] != "PASSED":
                continue
            try:
                ok, why = peer.available()
                if not ok:
                    state[peer.name].update(status="UNAVAILABLE", reason=why)
                    continue
                prepared = []
                for k, (d, ref_out) in enumerate(zip(drawn, ref_outs)):
                    call = peer.prepare(d)  # layout conversions: outside the timed region
                    result = check(definition.name, list(definition.outputs), as_tuple(call()), ref_out, tol, d)
                    if not result.passed:
                        state[peer.name].update(status=result.status, reason=f"trial {trial} draw {k}: {result.reason}")
                        break
                    prepared.append(call)
                else:
                    calls[f"peer:{peer.name}"] = (cycling(prepared), config.iters)
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, never fatal
                state[peer.name].update(status="RUNTIME_ERROR", reason=f"{type(exc).__name__}: {str(exc)[:200]}")
        if not calls:
            continue
        def timed(c: dict) -> dict:
            return time_many(c, dev, warmup=min(config.warmup, 3), budget_ms=config.budget_ms,
                             min_iters=config.min_iters) if c else {}

        try:
            timings = timed(calls)
        except Exception as exc:  # noqa: BLE001 - a peer that breaks during timing must not cost the reference
            for key in [k for k in calls if k.startswith("peer:")]:
                state[key[5:]].update(status="RUNTIME_ERROR", reason=f"timing: {type(exc).__name__}: {exc}"[:200])
                calls.pop(key)
            try:
                timings = timed(calls)
            except Exception as again:  # noqa: BLE001 - then a probe kernel broke: the row has no bound
                probe_error = f"timing: {type(again).__name__}: {str(again)[:200]}"
                for key in [k for k in calls if k.startswith(("probe:", "copy:"))]:
                    calls.pop(key)
                timings = timed(calls)
        for key, timing in timings.items():
            samples.setdefault(key, []).append(timing.median_ms)
            if key.startswith("peer:"):
                state[key[5:]]["timing_method"] = timing.method
        probes = {key.split(":", 1)[1]: t.median_ms for key, t in timings.items() if key.startswith("probe:")}
        if probes:  # this trial's bound: the fastest candidate kernel
            fastest = min(probes, key=probes.get)
            samples.setdefault("probe", []).append(probes[fastest])
            probe_trials.append({**infos[fastest], "variant_ms": probes})
        del args, drawn, ref_outs, calls
    mean = statistics.fmean
    work = floors.mean_work(works).as_dict() if works else None
    references = reference_summary({k[len(PREFIX):]: v for k, v in samples.items() if k.startswith(PREFIX)},
                                   graded_source(every_ref))  # with a dataset, the gate grades against it
    probe_ms = mean(samples["probe"]) if "probe" in samples else None
    probe_info = probe_summary(probe_trials) if probe_trials else {}
    if probe_error:
        probe_info["error"] = probe_error
    probe_info.update(probe_rates(probe_info, probe_ms, mean(samples["copy:probe"]) if "copy:probe" in samples
                                  else None))
    return {**references, "probe_ms": probe_ms, "probe": probe_info, "work": work,
            "baseline_s": round(time.perf_counter() - began, 2),
            "peers": {name: {"latency_ms": mean(samples[f"peer:{name}"]) if f"peer:{name}" in samples and
                             s["status"] == "PASSED" else None, **s} for name, s in state.items()}}


def cycling(calls: list):
    """One callable that runs the next of `calls` each time (round robin): a timed loop over several draws."""
    turn = itertools.cycle(calls)
    return lambda: next(turn)()


def probe_summary(trials: list[dict]) -> dict:
    """The probe's bytes over the trials it was timed in, as probe_ms is their mean: the mean bytes (so that
    gb_per_s = mean bytes / mean ms = all bytes / all time), each trial's own, and the path(s) and kernel(s) that
    ran: per trial the fastest candidate kernel (`variant`) and every candidate's median (`variant_ms`)."""
    out = {key: statistics.fmean(t[key] for t in trials) for key in ("read_bytes", "write_bytes", "descriptor_bytes")}
    paths = sorted({t["path"] for t in trials})
    variants = sorted({t["variant"] for t in trials})  # the kernel(s): of probe.VARIANTS or PIECE_VARIANTS
    return {**out, "read_bytes_trials": [t["read_bytes"] for t in trials], "path": "+".join(paths),
            "variant": "+".join(variants), "variant_ms_trials": [t.get("variant_ms") for t in trials],
            "ranges_trials": [t["ranges"] for t in trials], "pieces_trials": [t["pieces"] for t in trials]}


def probe_rates(info: dict, probe_ms: float | None, copy_ms: float | None) -> dict:
    """The probe's bandwidth (its mean bytes over its mean time) and, where the same-size copy was timed in the
    same trials, the copy's (the same bytes over its mean time) and the probe's as a percentage of it."""
    moved = info.get("read_bytes", 0) + info.get("write_bytes", 0)
    out = {"gb_per_s": moved / probe_ms / 1e6 if probe_ms else None}
    if probe_ms and copy_ms:
        out.update(copy_ms=copy_ms, copy_gb_per_s=moved / copy_ms / 1e6, pct_of_copy=copy_ms / probe_ms * 100)
    return out

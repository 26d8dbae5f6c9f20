"""Adapter between the agent (loop, tools, MCP server) and the GPU side (gate, timing, profiling): the only
module of sdk.agent that calls the gate, so a change of the gate's API touches this file alone.

The default `Hooks` calls the gate lazily; `timed=True` gives it a timing plan (`sdk.gate.CallPlan`: the same
calls as gating, more of them, some checked at random by the judge), and the latency comes from the judge's raw
per-call records (`sdk.bench.stats`); the reference time is the judge's wall time on the checked calls:
  sdk.gate.gate_solution(solution, definition, workloads, trials=, seed=, tol=contest_tolerance(definition),
                         plan=CallPlan(...) | None, timeout_s=, [device=]) -> [GateResult]
      GateResult.status ('PASSED', 'INCORRECT_NUMERICAL', ...), .reason, .workload, .raw (max_abs, calls,
      reference_ms, strict, seed, ...)
Without a GPU the gate runs on the CPU (the solutions' torch fallback) when the caller asks for it; timing is
never done there. If the gate is missing the step reports what it could not do; it never makes up numbers.
Tests pass a `Hooks` subclass or fake `sdk.gate` modules.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Quick but honest timing for a search step: warmup and timed calls per trial (CUPTI on a GPU); no peers, no A/A
# (the full bench does those).
SEARCH_TIMING = {"warmup": 5, "iters": 20, "method": "cupti", "reference": True, "aa": False, "peers": [],
                 "reference_iters": 2}


@dataclass
class GateOutcome:
    status: str                          # PASSED | FAILED | NOT_GATED
    rows: list[dict] = field(default_factory=list)
    reason: str = ""
    timings: list[dict] | None = None    # per workload when the gate also timed: workload, latency_ms, ref, cold/warm
    device: str | None = None


class Hooks:
    def __init__(self, timing: dict | None = None, timeout_s: float = 300.0, workloads_file: Path | None = None):
        self.timing = dict(SEARCH_TIMING if timing is None else timing)
        self.timeout_s = timeout_s
        self.workloads_file = Path(workloads_file) if workloads_file else None  # instead of the official set

    def gpu(self) -> str | None:
        """Device name when a CUDA GPU is usable, else None."""
        try:
            import torch
            return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        except Exception:
            return None

    def devices(self) -> list[str]:
        """One entry per GPU the gate may use ("cuda:0", ...); empty without a GPU."""
        if not self.gpu():
            return []
        try:
            import torch
            return [f"cuda:{i}" for i in range(max(1, torch.cuda.device_count()))]
        except Exception:
            return ["cuda:0"]

    def workloads(self, definition: str, keys: list[str] | None, count: int = 4) -> list:
        pool = self.all_workloads(definition)
        if keys:
            chosen = []
            for key in keys:
                hits = [w for w in pool if w.uuid.startswith(key)]
                if len(hits) != 1:
                    from ..errors import BadInputError
                    raise BadInputError(f"workload key {key!r} matches {len(hits)} workloads of {definition}")
                chosen.append(hits[0])
            return chosen
        return representative(pool, count)

    def all_workloads(self, definition: str) -> list:
        """Every workload a tool may name by uuid prefix: the official set, or the workloads file's."""
        from .. import workloads as wl
        if self.workloads_file is not None:
            return wl.parse_jsonl(self.workloads_file, definition)
        return list(wl.load(definition))

    def gate(self, solution, definition: str, workloads: list, *, trials: int, seed: int, timed: bool = True,
             device: str | None = None) -> GateOutcome:
        try:
            from ..gate import contest_tolerance, gate_solution
        except ImportError as exc:
            return GateOutcome("NOT_GATED", reason=f"sdk.gate is not available ({exc})")
        from ..bench import stats
        from ..gate import CallPlan

        extra = {"device": device} if device else {}
        plan = None
        if timed:  # the same calls as gating, more of them, some checked at random (sdk.gate.judge)
            import torch

            gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
            plan = CallPlan(trials=trials, warmup=self.timing.get("warmup", 5), iters=self.timing.get("iters", 20),
                            checks=2, profile=gpu)
        results = gate_solution(solution, definition, workloads, trials=trials, seed=seed,
                                tol=contest_tolerance(definition), plan=plan, timeout_s=self.timeout_s, **extra)
        rows, timings = [], []
        for index, result in enumerate(results):
            workload = getattr(result, "workload", None) or (workloads[index] if index < len(workloads) else None)
            status = getattr(result.status, "value", result.status)  # enum members -> 'PASSED'
            raw = getattr(result, "raw", None) or {}
            rows.append({"workload": getattr(workload, "uuid", workload), "status": str(status),
                         "reason": str(getattr(result, "reason", "") or ""), "max_abs": raw.get("max_abs"),
                         "max_rel": raw.get("max_rel"),
                         "matched_ratio": (raw.get("extra") or {}).get("matched_ratio")})
            bench = {}
            if plan is not None and str(status) == "PASSED":  # statistics from the judge's raw per-call records
                refs = sorted(raw.get("reference_ms") or [])
                bench = {**stats.latency(raw.get("calls") or [], str(raw.get("device", "")).startswith("cuda")),
                         "reference_latency_ms": refs[len(refs) // 2] if refs else None}
            if bench.get("latency_ms") is not None:
                timings.append({"workload": rows[-1]["workload"], "latency_ms": float(bench["latency_ms"]),
                                "reference_ms": bench.get("reference_latency_ms"),
                                "cold_ms": bench.get("cold_latency_ms"), "warm_ms": bench.get("warm_latency_ms"),
                                "method": bench.get("timing_method")})
        passed = bool(rows) and all(r["status"] == "PASSED" for r in rows)
        failed = [r for r in rows if r["status"] != "PASSED"]
        reason = "" if passed else (f"{len(failed)}/{len(rows)} not PASSED: {failed[0]['status']} "
                                    f"{failed[0]['reason']}".strip() if failed else "gate returned no results")
        complete = timed and passed and len(timings) == len(rows)
        return GateOutcome("PASSED" if passed else "FAILED", rows, reason, timings if complete else None,
                           device=device)

    def time(self, solution, definition: str, workloads: list, *, seed: int) -> list[dict]:
        """Only reached when the gate did not time (a custom gate): there is no separate timer to call."""
        raise RuntimeError("the gate returned no timings and no separate timer is wired (see sdk.agent.hooks)")

    def profile(self, package_dir: Path, definition: str, workload, out_dir: Path,
                device: str | None = None) -> str | None:
        """One ncu pass over a single call of the candidate (where ncu exists and may read counters)."""
        ncu = shutil.which("ncu")
        if ncu is None or not self.gpu():
            return None
        cmd = [ncu, "--section", "SpeedOfLight", "--section", "Occupancy", "--section", "LaunchStats", "-c", "8",
               sys.executable, "-m", "sdk.agent.profile_driver", str(package_dir), definition, workload.uuid]
        env = None
        if device and device.startswith("cuda:"):
            import os
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": device.split(":", 1)[1]}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
        (out_dir / "ncu.txt").write_text(proc.stdout + proc.stderr)
        return (proc.stdout + proc.stderr)[-6000:]


def representative(items: list, count: int) -> list:
    """`count` workloads evenly spread from smallest to largest (by the product of their variable axes)."""
    if len(items) <= count:
        return items
    ranked = sorted(items, key=lambda w: (_size(w), w.uuid))
    picks = sorted({round(i * (len(ranked) - 1) / (count - 1)) for i in range(count)}) if count > 1 else [0]
    return [ranked[i] for i in picks]


def _size(workload) -> int:
    size = 1
    for value in workload.axes.values():
        size *= max(1, int(value))
    return size

"""Adapter between the loop and the GPU side (gate, timing, profiling), so the loop never imports them directly.

The default `Hooks` calls the gate lazily, asking it to time every workload that passes in the same worker
process (one build per candidate):
  sdk.gate.gate_solution(solution, definition, workloads, trials=, seed=, tol=contest_tolerance(definition),
                         timing={warmup, iters, method, reference, aa, peers, reference_iters}) -> [GateResult]
      GateResult.status ('PASSED', 'INCORRECT_NUMERICAL', ...), .reason, .workload, .raw["bench"] (latency_ms, and
      cold_latency_ms / warm_latency_ms for a declared cache)
If the gate is missing, or there is no GPU, the step reports what it could not do; it never makes up numbers.
Tests pass a `Hooks` subclass or fake `sdk.gate` modules.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Quick but honest timing for a search step: CUPTI medians, no reference or peers (speedups are relative to the
# run's first gated candidate, timed the same way in the same session).
SEARCH_TIMING = {"warmup": 5, "iters": 20, "method": "cupti", "reference": False, "aa": False, "peers": [],
                 "reference_iters": 1}


@dataclass
class GateOutcome:
    status: str                          # PASSED | FAILED | NOT_GATED
    rows: list[dict] = field(default_factory=list)
    reason: str = ""
    timings: list[dict] | None = None    # per workload when the gate also timed: workload, latency_ms, cold/warm


class Hooks:
    def __init__(self, timing: dict | None = None, timeout_s: float = 300.0):
        self.timing = dict(SEARCH_TIMING if timing is None else timing)
        self.timeout_s = timeout_s

    def gpu(self) -> str | None:
        """Device name when a CUDA GPU is usable, else None."""
        try:
            import torch
            return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        except Exception:
            return None

    def workloads(self, definition: str, keys: list[str] | None, count: int = 4) -> list:
        from .. import workloads as wl
        if keys:
            return wl.select(definition, keys)
        return representative(list(wl.load(definition)), count)

    def gate(self, solution, definition: str, workloads: list, *, trials: int, seed: int) -> GateOutcome:
        try:
            from ..gate import contest_tolerance, gate_solution
        except ImportError as exc:
            return GateOutcome("NOT_GATED", reason=f"sdk.gate is not available ({exc})")
        results = gate_solution(solution, definition, workloads, trials=trials, seed=seed,
                                tol=contest_tolerance(definition), timing=self.timing, timeout_s=self.timeout_s)
        rows, timings = [], []
        for index, result in enumerate(results):
            workload = getattr(result, "workload", None) or (workloads[index] if index < len(workloads) else None)
            status = getattr(result.status, "value", result.status)  # enum members -> 'PASSED'
            rows.append({"workload": getattr(workload, "uuid", workload), "status": str(status),
                         "reason": str(getattr(result, "reason", "") or "")})
            bench = (getattr(result, "raw", None) or {}).get("bench") or {}
            if bench.get("latency_ms") is not None:
                timings.append({"workload": rows[-1]["workload"], "latency_ms": float(bench["latency_ms"]),
                                "cold_ms": bench.get("cold_latency_ms"), "warm_ms": bench.get("warm_latency_ms"),
                                "method": bench.get("timing_method")})
        passed = bool(rows) and all(r["status"] == "PASSED" for r in rows)
        failed = [r for r in rows if r["status"] != "PASSED"]
        reason = "" if passed else (f"{len(failed)}/{len(rows)} not PASSED: {failed[0]['status']} "
                                    f"{failed[0]['reason']}".strip() if failed else "gate returned no results")
        complete = passed and len(timings) == len(rows)
        return GateOutcome("PASSED" if passed else "FAILED", rows, reason, timings if complete else None)

    def time(self, solution, definition: str, workloads: list, *, seed: int) -> list[dict]:
        """Only reached when the gate did not time (a custom gate): there is no separate timer to call."""
        raise RuntimeError("the gate returned no timings and no separate timer is wired (see sdk.agent.hooks)")

    def profile(self, package_dir: Path, definition: str, workload, out_dir: Path) -> str | None:
        """One ncu pass over a single call of the candidate (where ncu exists and may read counters)."""
        ncu = shutil.which("ncu")
        if ncu is None:
            return None
        cmd = [ncu, "--section", "SpeedOfLight", "--section", "Occupancy", "--section", "LaunchStats", "-c", "8",
               sys.executable, "-m", "sdk.agent.profile_driver", str(package_dir), definition, workload.uuid]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
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

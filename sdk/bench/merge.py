"""Merge partial bench runs (results files + their trace folders) into one results file, saying where each number
came from.

A device run that hits its time limit keeps the rows of the solutions it finished (`environment.complete` false)
and the traces of every workload it gated. Merging takes, per (solution, workload), the row of the latest run that
has one; a solution that was gated and timed but whose run ended before its rows were saved is rebuilt from its
trace (status, reason, bench latency); rows without a same-run reference, floor or peers borrow them from the host
row of the same workload in another run, and say so (`reference_run`, `same_run_reference`). Gate-only traces give
a status and no latency. Solution hashes are kept, so evidence can check that sources did not change.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import jsonl
from .._fib import Trace
from . import scoring
from .rows import READABLE, SCHEMA
from .runner import _finite, flag_within_noise

BORROWED = ("reference_latency_ms", "floor_ms", "work", "peers")


def _trace_rows(path: Path, label: str, hashes: dict[str, str], gate_only: bool) -> list[dict]:
    rows = []
    for line in jsonl.read(path):
        t = Trace.model_validate_json(line)
        ev = t.evaluation
        perf = ev.performance
        reason = ev.log.split("\n", 1)[0].split(": ", 1)[1] if ev.status.value != "PASSED" and ": " in ev.log else ""
        rows.append({"definition": t.definition, "solution": t.solution, "solution_hash": hashes.get(t.solution),
                     "workload": t.workload.uuid, "axes": dict(t.workload.axes), "status": ev.status.value,
                     "reason": reason, "latency_ms": None if gate_only or perf is None else perf.latency_ms,
                     "reference_latency_ms": (perf.reference_latency_ms or None) if perf and not gate_only else None,
                     "floor_ms": None, "work": None, "peers": {},
                     "timing_method": None if gate_only else "cupti-span (torch.profiler/kineto), cold L2, no CUDA graph",
                     "matched_ratio": (ev.correctness.extra or {}).get("matched_ratio") if ev.correctness else None,
                     "max_abs_error": ev.correctness.max_absolute_error if ev.correctness else None,
                     "run": label, "from_trace": True, "gate_only": gate_only})
    return rows


def merge(runs: list[dict]) -> dict:
    """runs: [{"label", "results": [paths], "traces": [(path, gate_only)], "hashes": {solution: hash},
    "environment_patch": {...}}], oldest first."""
    chosen: dict[tuple[str, str], dict] = {}
    environments = []
    for run in runs:
        env, own = {}, set()
        for results in run.get("results", []):
            doc = json.loads(Path(results).read_text())
            if doc.get("schema") not in READABLE:
                raise ValueError(f"{results}: not a {' or '.join(READABLE)} file")
            env = {**doc["environment"], **run.get("environment_patch", {})}
            for row in doc["rows"]:
                own.add((row["solution"], row["workload"]))
                _offer(chosen, {**row, "run": run["label"], "from_trace": False})
        for path, gate_only in run.get("traces", []):
            for row in _trace_rows(Path(path), run["label"], run.get("hashes", {}), gate_only):
                if (row["solution"], row["workload"]) not in own:  # the run's own row is richer than its trace
                    _offer(chosen, row)
        environments.append({"run": run["label"], **env})
    rows = sorted(chosen.values(), key=lambda r: (r["definition"], r["solution"], r["workload"]))
    hosts: dict[tuple[str, str], dict] = {}
    for r in rows:  # the rows that carry their own reference timing (results rows first: they have floors and peers)
        if r.get("reference_latency_ms") not in (None, 0):
            key = (r["definition"], r["workload"])
            if key not in hosts or (hosts[key].get("from_trace") and not r.get("from_trace")):
                hosts[key] = r
    for r in rows:
        host = hosts.get((r["definition"], r["workload"]))
        own = r.get("reference_latency_ms") not in (None, 0)
        r["same_run_reference"] = bool(own or (host and host["run"] == r["run"]))
        if host is not None:
            for key in BORROWED if not own else ("floor_ms", "work", "peers"):
                if r.get(key) in (None, {}):
                    r[key] = host.get(key)
            r["reference_run"] = r["run"] if own else host["run"]
    flag_within_noise(rows)
    return {"schema": SCHEMA, "environment": {"merged": True, "runs": environments,
                                              "gpu": environments[-1].get("gpu") if environments else None,
                                              "timing_method": "cupti-span (torch.profiler/kineto), cold L2, no CUDA graph",
                                              "seed": 0},
            "rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict:
    """Timing summary over timed rows; gate-only rows count in `gate` (passed / gated) and nowhere else."""
    summary = scoring.summarize([r for r in rows if not r.get("gate_only")])
    for definition, entry in summary.items():
        gate = {}
        for r in rows:
            if r["definition"] == definition:
                passed, total = gate.get(r["solution"], (0, 0))
                gate[r["solution"]] = (passed + (r["status"] == "PASSED"), total + 1)
        entry["gate"] = {s: {"passed": p, "total": t} for s, (p, t) in sorted(gate.items())}
    return summary


def _offer(chosen: dict, row: dict) -> None:
    """Later runs win, but a timed PASSED row is never replaced by an untimed or failed one."""
    key = (row["solution"], row["workload"])
    old = chosen.get(key)
    timed = row["status"] == "PASSED" and row.get("latency_ms")
    old_timed = old is not None and old["status"] == "PASSED" and old.get("latency_ms")
    if old is None or timed or not old_timed:
        chosen[key] = row


def write(results: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(results), indent=1, allow_nan=False, default=str) + "\n")
    return path

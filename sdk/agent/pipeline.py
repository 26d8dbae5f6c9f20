"""What a finished candidate goes through before it counts, whoever wrote it (a model session, the offline
search, an external agent over MCP): duplicate check -> static anti-hacking scan -> nvcc sm_90a compile check ->
correctness gate on the run's workloads -> timing (GPU only) -> speedups (vs reference, parent, first). Results a tool already produced on
the same source bytes and workloads are reused, never re-measured. Evidence files land in the candidate folder:
scan.json, build.log, gate.json, bench.json.
"""
from __future__ import annotations

import json
from dataclasses import asdict

from . import policy as pol
from .frontier import speedups
from .tools import ToolBox


def blank_record(box: ToolBox) -> dict:
    ws = box.ws
    return {"sources_sha256": ws.digest(), "params": dict(ws.params), "overlay_files": ws.changed_files(),
            "patches": len(ws.patches), "statuses": {}, "latency_ms": None, "speedup": None,
            "speedup_vs_reference": None, "speedup_vs_parent": None, "speedup_vs_first": None,
            "speedup_basis": None, "declared_cache": False, "cold_warm_reported": False, "ptxas": []}


def finalize(box: ToolBox, policy: pol.Policy, earlier: list[dict]) -> dict:
    """The record fields the pipeline decides (statuses, scores, evidence), for `box.ws` as it is now."""
    ws, env = box.ws, box.env
    out = blank_record(box)
    statuses = out["statuses"]
    files = ws.files()
    twin = next((r for r in earlier if r.get("sources_sha256") == out["sources_sha256"]), None)
    if twin is not None:
        statuses["duplicate"] = f"duplicate of {twin['id']} (identical sources)"
        return out
    findings = policy.scan(files)
    (ws.folder / "scan.json").write_text(json.dumps([f.as_dict() for f in findings], indent=1) + "\n")
    blocked = pol.blocking(findings)
    out["declared_cache"] = pol.declares_cache(files)
    if blocked:
        first = blocked[0]
        statuses["scan"] = f"blocked: {first.rule} at {first.file}:{first.line} ({len(blocked)} finding(s))"
        return out
    warns = [f for f in findings if f.severity == "warn"]
    statuses["scan"] = "passed" + (f" with {len(warns)} warning(s)" if warns else "")
    if env.compile_mode == "always" or (env.compile_mode == "auto" and not env.gpu):
        build = box.compile_result()
        statuses["compile"] = ("skipped: " + build.skipped) if build.skipped else (
            "ok" if build.ok else f"failed: {build.first_error()}")
        out["ptxas"] = build.kernels
        if not build.ok:
            return out
    else:
        statuses["compile"] = "ok (by the gate's JIT build)" if env.gpu else "skipped: --compile-check never"
    if not env.gpu and not env.cpu_gate:
        statuses["gate"] = "not gated: no GPU"
        statuses["bench"] = "not timed: no GPU"
        return out
    outcome = box.gate_outcome(list(env.selected), env.trials, timed=bool(env.gpu))
    (ws.folder / "gate.json").write_text(json.dumps(asdict(outcome), indent=1) + "\n")
    if outcome.status == "NOT_GATED":
        statuses["gate"] = f"not gated: {outcome.reason}"
        statuses["bench"] = "not timed: not gated"
        return out
    statuses["gate"] = "PASSED" if outcome.status == "PASSED" else f"FAILED ({outcome.reason})"
    if not env.gpu:
        statuses["device"] = "cpu: torch fallback, the CUDA kernels did not run"
        statuses["bench"] = "not timed: no GPU"
        return out
    if outcome.status != "PASSED":
        statuses["bench"] = "not timed: gate did not pass"
        return out
    try:  # the gate may have timed the candidate in the same worker; otherwise time it now
        rows = outcome.timings if outcome.timings is not None else env.hooks.time(
            ws.solution(), env.definition, list(env.selected), seed=env.seed)
    except Exception as exc:  # a missing sdk.bench or a crash while timing: say so, time nothing
        statuses["bench"] = f"not timed: {type(exc).__name__}: {str(exc)[:160]}"
        return out
    (ws.folder / "bench.json").write_text(json.dumps(rows, indent=1) + "\n")
    statuses["bench"] = f"timed {len(rows)} workload(s)"
    out["cold_warm_reported"] = bool(rows) and all(r.get("cold_ms") is not None and r.get("warm_ms") is not None
                                                   for r in rows)
    out["bench_rows"] = rows  # scored by `score` once the run's first timed candidate is known
    out.update(score(rows, box.parent_bench, box.first_bench or rows))
    return out


def score(rows: list[dict], parent_rows: list[dict] | None, first_rows: list[dict]) -> dict:
    return speedups(rows, parent_rows, first_rows)

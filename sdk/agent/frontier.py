"""Scores, decisions and the frontier: which gated, timed candidates the search keeps building on.

Every timed candidate gets three mean-of-ratio speedups over the workloads it was timed on:
  vs reference  the PyTorch reference timed in the same worker (the contest's baseline where no FlashInfer one runs)
  vs parent     its parent's latency on the same workloads (did this step help?)
  vs first      the run's first timed candidate (only a fallback score when the reference was not timed)
The score that ranks candidates is the speedup vs reference when known, else vs first (`speedup_basis` says
which). The frontier holds the best `size` accepted candidates; new candidates are built on its members, so the
search is a beam over several lines, not one greedy chain.
"""
from __future__ import annotations

import statistics

SUSPICIOUS_GAIN = 10.0     # speedup over the best so far that is held for review


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 6) if values else None


def speedups(rows: list[dict], parent_rows: list[dict] | None, first_rows: list[dict] | None) -> dict:
    latencies = {r["workload"]: r["latency_ms"] for r in rows}
    vs_ref = _mean([r["reference_ms"] / r["latency_ms"] for r in rows
                    if r.get("reference_ms") and r["latency_ms"] > 0])
    parent = {r["workload"]: r["latency_ms"] for r in parent_rows or []}
    first = {r["workload"]: r["latency_ms"] for r in first_rows or []}
    vs_parent = _mean([parent[w] / t for w, t in latencies.items() if w in parent and t > 0])
    vs_first = _mean([first[w] / t for w, t in latencies.items() if w in first and t > 0])
    complete_ref = vs_ref is not None and all(r.get("reference_ms") for r in rows)
    return {"latency_ms": _mean([r["latency_ms"] for r in rows]), "speedup_vs_reference": vs_ref,
            "speedup_vs_parent": vs_parent, "speedup_vs_first": vs_first,
            "speedup": vs_ref if complete_ref else vs_first,
            "speedup_basis": "reference" if complete_ref else "first timed candidate"}


def rule_decision(record: dict, best: dict | None, min_gain: float, parent: dict | None = None,
                  frontier_floor: float | None = None) -> dict:
    """accept / rework / reject / blocked from the recorded statuses alone.

    accept: the first timed candidate, a new best beyond the noise margin, or a candidate that beats its own
    parent beyond the margin and would rank inside a full frontier (it joins the frontier)."""
    s = record["statuses"]
    for step in ("coder", "render", "scan", "duplicate", "compile"):
        if str(s.get(step, "ok")).startswith(("error", "blocked", "failed", "unparsable", "duplicate")):
            return {"decision": "reject", "reason": f"{step}: {s[step]}"}
    gate = s.get("gate", "")
    if gate.startswith("not gated"):
        compiled = s.get("compile", "")
        done = "compiled for sm_90a" if compiled == "ok" else f"compile {compiled}"
        return {"decision": "blocked", "reason": f"{done}; {gate}; {s.get('bench', 'not timed')}"}
    if gate != "PASSED":
        return {"decision": "reject", "reason": f"gate: {gate}"}
    if record.get("speedup") is None:
        where = f" ({s['device']})" if s.get("device") else ""
        return {"decision": "blocked", "reason": f"gate PASSED{where}; {s.get('bench', 'not timed')}"}
    if record.get("declared_cache") and not record.get("cold_warm_reported"):
        return {"decision": "rework", "reason": "declares a cache: cold and warm latency must both be reported"}
    if best is None:
        return {"decision": "accept", "reason": "first gated and timed candidate"}
    ratio = record["speedup"] / best["speedup"]
    if ratio > SUSPICIOUS_GAIN:
        return {"decision": "rework", "reason": f"{ratio:.1f}x over the best in one step: held for review"}
    if ratio >= 1 + min_gain:
        return {"decision": "accept", "reason": f"new best: {(ratio - 1) * 100:.1f}% faster than {best['id']}"}
    if parent is not None and parent is not best and parent.get("speedup"):
        over_parent = record["speedup"] / parent["speedup"]
        if over_parent >= 1 + min_gain and (frontier_floor is None or record["speedup"] > frontier_floor):
            return {"decision": "accept", "reason": f"joins the frontier: {(over_parent - 1) * 100:.1f}% faster "
                                                    f"than its parent {parent['id']}"}
    if ratio >= 1 - min_gain:
        return {"decision": "rework", "reason": f"within the {min_gain:.0%} noise margin of {best['id']}"}
    return {"decision": "reject", "reason": f"{(1 - ratio) * 100:.1f}% slower than {best['id']}"}


class Frontier:
    def __init__(self, size: int = 3):
        self.size = max(1, size)
        self.members: list[dict] = []

    @property
    def best(self) -> dict | None:
        return self.members[0] if self.members else None

    def floor(self) -> float | None:
        """The score a candidate must beat to enter a full frontier (None while there is room)."""
        return self.members[-1]["speedup"] if len(self.members) >= self.size else None

    def add(self, record: dict) -> None:
        self.members = sorted(self.members + [record], key=lambda r: (-r["speedup"], r["id"]))[: self.size]

    def parents(self, count: int) -> list[dict]:
        """`count` parents for the next candidates, best first, cycling through the members."""
        if not self.members:
            return []
        return [self.members[i % len(self.members)] for i in range(count)]

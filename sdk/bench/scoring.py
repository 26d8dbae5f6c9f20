"""Scores over benchmark result rows (schema "fib-sdk.results/1"): the contest formula and the paper's view.

A row: {definition, solution, workload, axes, status, reason, latency_ms, reference_latency_ms, floor_ms,
work, aa_noise_pct, peers: {name: {latency_ms, status, cuda_graph}}}. Every function returns plain dicts.

Missing values (None), decided once here:
* Ours: a row passes only with status "PASSED" *and* a latency; a PASSED row without a latency cannot be scored
  and counts as a failure (the conservative reading).
* Contest formula (FlashInfer-Bench `get_solution_score`): mean over workloads of baseline / ours; any failed row
  of ours zeroes the score and the win rate; workloads whose baseline has no passing latency are left out, as the
  official scorer only counts workloads where the baseline passed. With no workload left the score is None.
* Numbers that are not positive and finite (None, 0, or the strings "nan"/"inf" a results file stores for
  non-finite floats) count as missing.
* Ratios over passed rows (paper view, vs best peer, over floor) skip a row whose other side is missing and report
  how many rows they used (`n`); with none they return None, never 0 or NaN.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Callable, Iterable

PASSED = "PASSED"
REFERENCE = "reference"


def passed(row: dict) -> bool:
    return row.get("status") == PASSED and _positive(row.get("latency_ms"))


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def reference_latency(row: dict) -> float | None:
    x = row.get("reference_latency_ms")
    return x if _positive(x) else None


def floor_latency(row: dict) -> float | None:
    x = row.get("floor_ms")
    return x if _positive(x) else None


def peer_latency(row: dict, peer: str) -> float | None:
    """A peer's latency, only when it passed on this workload."""
    entry = (row.get("peers") or {}).get(peer) or {}
    x = entry.get("latency_ms")
    return x if entry.get("status") == PASSED and _positive(x) else None


def peer_names(rows: Iterable[dict]) -> list[str]:
    return sorted({name for row in rows for name in (row.get("peers") or {})})


def baseline_of(name: str) -> Callable[[dict], float | None]:
    """'reference' or a peer's name -> a function giving that baseline's latency for a row."""
    return reference_latency if name == REFERENCE else (lambda row: peer_latency(row, name))


def contest_score(rows: list[dict], baseline: str = REFERENCE) -> dict:
    """The contest formula against `baseline` ('reference' or a peer): mean of baseline/ours, win rate (ratio > 1),
    zero if any workload failed."""
    latency = baseline_of(baseline)
    failed = [r for r in rows if not passed(r)]
    scored = [(latency(r), r["latency_ms"]) for r in rows if passed(r) and latency(r) is not None]
    result = {"baseline": baseline, "workloads": len(scored), "failed": len(failed),
              "excluded_no_baseline": sum(1 for r in rows if latency(r) is None and passed(r))}
    if failed:
        return {**result, "score": 0.0, "win_rate": 0.0}
    if not scored:
        return {**result, "score": None, "win_rate": None}
    ratios = [b / ours for b, ours in scored]
    return {**result, "score": mean(ratios), "win_rate": sum(1 for x in ratios if x > 1) / len(ratios)}


def _ratios(rows: list[dict], numerator: Callable[[dict], float | None]) -> list[float]:
    """numerator(row) / ours over passed rows where the numerator exists."""
    return [n / r["latency_ms"] for r in rows if passed(r) and (n := numerator(r)) is not None]


def speedup_vs_reference(rows: list[dict]) -> dict:
    """The paper's view: reference / ours over passed workloads, as mean of ratios, geomean and ratio of means."""
    pairs = [(reference_latency(r), r["latency_ms"]) for r in rows if passed(r) and reference_latency(r)]
    ratios = [ref / ours for ref, ours in pairs]
    ratio_of_means = sum(p[0] for p in pairs) / sum(p[1] for p in pairs) if pairs else None
    return {"mean": mean(ratios), "geomean": geomean(ratios), "ratio_of_means": ratio_of_means, "n": len(ratios)}


def own_reference_speedup(rows: list[dict]) -> dict:
    """Against the SDK's own (vectorised) reference, where a run timed it beside the official one."""
    ratios = _ratios(rows, lambda r: (r.get("references_ms") or {}).get("fib-sdk"))
    return {"mean": mean(ratios), "geomean": geomean(ratios), "n": len(ratios)}


def speedup_band(row: dict) -> tuple[float, float] | None:
    """The speedup's noise band from the trials: (fastest reference trial / slowest of ours, slowest reference trial
    / fastest of ours); None without trials of both."""
    refs = [t for t in row.get("reference_trials_ms") or [] if _positive(t)]
    ours = [t for t in row.get("latency_trials_ms") or [] if _positive(t)]
    if not (passed(row) and refs and ours):
        return None
    return min(refs) / max(ours), max(refs) / min(ours)


def mean_speedup_band(rows: list[dict]) -> tuple[float, float] | None:
    """The band of the mean of ratios: the means of the per-workload lows and highs."""
    bands = [b for r in rows if (b := speedup_band(r))]
    return (mean([b[0] for b in bands]), mean([b[1] for b in bands])) if bands else None


def latency_over_bound(rows: list[dict]) -> dict:
    """ours / bound_ms (the measured bound) over passed rows that have one: median, max, how many within 1.5x."""
    ratios = [r["latency_ms"] / b for r in rows if passed(r) and _positive(b := r.get("bound_ms"))]
    return {"median": statistics.median(ratios) if ratios else None, "max": max(ratios, default=None),
            "n": len(ratios), "within_1_5": sum(1 for x in ratios if x <= 1.5)}


LAUNCH_BOUND = 0.2  # share of a call's span in which its GPU work waits for the host's next launch (`idle_ms`)
HOST_BOUND = 0.8    # older files (no idle_ms): host time of a call / its latency at or above which it was flagged


def launch_bound(rows: Iterable[dict], ratio: float = LAUNCH_BOUND) -> list[dict]:
    """Passed GPU rows (CUPTI spans) whose calls leave the GPU idle for at least `ratio` of their span between
    their launches (`idle_ms`): faster kernels do not shorten those gaps, fewer or cheaper launches do. A row of an
    older file (no idle_ms) falls back to its host time (`host_ms` >= HOST_BOUND x latency), which also counts the
    host's work before the first launch and so flags a single long kernel too. Wall-clock rows never are (on a CPU
    the host time is the call)."""
    out = []
    for r in rows:
        if not (passed(r) and str(r.get("timing_method") or "").startswith("cupti")):
            continue
        if r.get("idle_ms") is not None:
            if r["idle_ms"] >= ratio * r["latency_ms"]:
                out.append(r)
        elif _positive(r.get("host_ms")) and r["host_ms"] >= HOST_BOUND * r["latency_ms"]:
            out.append(r)
    return out


def best_peer_latency(row: dict) -> tuple[str, float] | None:
    """(peer, latency) of the fastest peer that passed on this workload; ties go to the first name."""
    found = [(lat, name) for name in sorted(row.get("peers") or {}) if (lat := peer_latency(row, name))]
    return (min(found)[1], min(found)[0]) if found else None


def mean_speedup_vs_best_peer(rows: list[dict]) -> dict:
    """Per workload the best passing peer's latency / ours, averaged over workloads where ours and a peer passed.
    `best_peer` names the peer that was fastest on the most of those workloads (ties: first name)."""
    ratios, winners = [], Counter()
    for r in rows:
        best = best_peer_latency(r)
        if passed(r) and best:
            ratios.append(best[1] / r["latency_ms"])
            winners[best[0]] += 1
    best_peer = min(winners, key=lambda name: (-winners[name], name)) if winners else None
    return {"mean": mean(ratios), "geomean": geomean(ratios), "n": len(ratios), "best_peer": best_peer,
            "best_on": dict(sorted(winners.items()))}


def latency_over_floor(rows: list[dict]) -> dict:
    ratios = [r["latency_ms"] / f for r in rows if passed(r) and (f := floor_latency(r)) is not None]
    return {"mean": mean(ratios), "geomean": geomean(ratios), "min": min(ratios, default=None),
            "max": max(ratios, default=None), "n": len(ratios)}


def mean_latency_over_floor(rows: list[dict]) -> float | None:
    return latency_over_floor(rows)["mean"]


def group(rows: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """{definition: {solution: rows in input order}}, both levels sorted by name."""
    grouped: dict[str, dict[str, list[dict]]] = {}
    for row in rows:
        grouped.setdefault(row["definition"], {}).setdefault(row["solution"], []).append(row)
    return {d: {s: grouped[d][s] for s in sorted(grouped[d])} for d in sorted(grouped)}


def summarize_solution(rows: list[dict]) -> dict:
    """The summary fields for one solution's rows (all of one definition)."""
    ref = speedup_vs_reference(rows)
    vs_ref = contest_score(rows, REFERENCE)
    peers = mean_speedup_vs_best_peer(rows)
    return {
        "solution": rows[0]["solution"] if rows else None,
        "passed": sum(1 for r in rows if passed(r)),
        "total": len(rows),
        "mean_speedup_vs_reference": ref["mean"],
        "geomean_speedup_vs_reference": ref["geomean"],
        "ratio_of_means_vs_reference": ref["ratio_of_means"],
        "best_peer": peers["best_peer"],
        "mean_speedup_vs_best_peer": peers["mean"],
        "geomean_speedup_vs_best_peer": peers["geomean"],
        "mean_latency_over_floor": mean_latency_over_floor(rows),
        "mean_speedup_vs_own_reference": own_reference_speedup(rows)["mean"],
        "mean_speedup_band": mean_speedup_band(rows),
        "latency_over_bound": latency_over_bound(rows),
        "contest_score_vs_reference": vs_ref["score"],
        "win_rate_vs_reference": vs_ref["win_rate"],
        "contest_score_vs_peers": {p: contest_score(rows, p) for p in peer_names(rows)},
    }


def _rank(summary: dict) -> tuple:
    """Best solution first: the contest score vs the reference (None last), then the name."""
    score = summary["contest_score_vs_reference"]
    return (score is None, -(score or 0.0), summary["solution"] or "")


def summarize(rows: list[dict]) -> dict:
    """{definition: {<best solution's summary>, "solutions": {solution: summary, ...}}}, keys sorted.
    The best solution is the one with the highest contest score vs the reference (failed solutions score 0)."""
    out = {}
    for definition, solutions in group(rows).items():
        per_solution = {s: summarize_solution(solution_rows) for s, solution_rows in solutions.items()}
        best = min(per_solution.values(), key=_rank)
        out[definition] = {**best, "solutions": per_solution}
    return out


# Contest tracks: a track's score is the sum of its kernels' scores over the kernels it expects (DSA ships two),
# so a missing or failed kernel counts 0.
TRACKS = {"moe": ("moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048",),
          "dsa": ("dsa_topk_indexer_fp8_h64_d128_topk2048_ps64",
                  "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64")}


def track_scores(summary: dict, key: str = "contest_score_vs_reference") -> dict:
    """{track: score} for the tracks with at least one definition in `summary` (None scores count 0)."""
    return {track: sum((summary[d].get(key) or 0.0) for d in kernels if d in summary) / len(kernels)
            for track, kernels in TRACKS.items() if any(d in summary for d in kernels)}

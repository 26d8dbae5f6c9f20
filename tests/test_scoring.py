"""Scoring: the contest formula, the paper's aggregations and the explicit handling of missing values."""
import math

import pytest

from sdk.bench import scoring

DEF = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"


def row(workload, latency, ref=None, status="PASSED", floor=None, peers=None, solution="ours", definition=DEF):
    return {"definition": definition, "solution": solution, "workload": workload, "axes": {}, "status": status,
            "reason": None, "latency_ms": latency, "reference_latency_ms": ref, "floor_ms": floor,
            "work": None, "aa_noise_pct": None, "peers": peers or {}}


def peer(latency, status="PASSED", graph=False):
    return {"latency_ms": latency, "status": status, "cuda_graph": graph}


def test_mean_and_geomean_differ_on_uneven_ratios():
    rows = [row("a", 1.0, ref=1.0), row("b", 1.0, ref=4.0)]
    view = scoring.speedup_vs_reference(rows)
    assert view["mean"] == pytest.approx(2.5)
    assert view["geomean"] == pytest.approx(2.0)
    assert view["ratio_of_means"] == pytest.approx(2.5)  # (1 + 4) / (1 + 1)
    score = scoring.contest_score(rows)
    assert (score["score"], score["win_rate"], score["workloads"]) == (pytest.approx(2.5), 0.5, 2)


def test_one_failed_workload_zeroes_the_contest_score():
    rows = [row("a", 1.0, ref=10.0), row("b", None, ref=10.0, status="INCORRECT_NUMERICAL")]
    score = scoring.contest_score(rows)
    assert (score["score"], score["win_rate"], score["failed"]) == (0.0, 0.0, 1)
    # The paper's view still reports the passed workload, and says how many it used.
    assert scoring.speedup_vs_reference(rows) == {"mean": 10.0, "geomean": pytest.approx(10.0),
                                                  "ratio_of_means": 10.0, "n": 1}


def test_passed_without_latency_counts_as_failure():
    rows = [row("a", 1.0, ref=2.0), row("b", None, ref=2.0)]
    assert not scoring.passed(rows[1])
    assert scoring.contest_score(rows)["score"] == 0.0


def test_missing_reference_excludes_the_workload_not_zero():
    rows = [row("a", 1.0, ref=3.0), row("b", 1.0, ref=None)]
    score = scoring.contest_score(rows)
    assert (score["score"], score["workloads"], score["excluded_no_baseline"]) == (3.0, 1, 1)
    assert scoring.speedup_vs_reference(rows)["n"] == 1


def test_nothing_scorable_gives_none_not_zero():
    rows = [row("a", 1.0, ref=None)]
    assert scoring.contest_score(rows)["score"] is None
    assert scoring.speedup_vs_reference(rows) == {"mean": None, "geomean": None, "ratio_of_means": None, "n": 0}
    assert scoring.mean_latency_over_floor(rows) is None


def test_peer_as_baseline_skips_workloads_where_the_peer_failed():
    rows = [row("a", 1.0, peers={"dg": peer(2.0)}), row("b", 1.0, peers={"dg": peer(None, "RUNTIME_ERROR")})]
    score = scoring.contest_score(rows, "dg")
    assert (score["score"], score["workloads"], score["excluded_no_baseline"]) == (2.0, 1, 1)


def test_best_peer_is_the_fastest_passing_peer_per_workload():
    rows = [row("a", 1.0, peers={"x": peer(2.0), "y": peer(3.0)}),
            row("b", 1.0, peers={"x": peer(0.5, "INCORRECT_NUMERICAL"), "y": peer(4.0)}),
            row("c", 1.0, peers={"x": peer(1.0), "y": peer(None, "TIMEOUT")}),
            row("d", 1.0)]  # no peer at all: left out
    best = scoring.mean_speedup_vs_best_peer(rows)
    assert best["mean"] == pytest.approx((2.0 + 4.0 + 1.0) / 3)
    assert (best["n"], best["best_peer"], best["best_on"]) == (3, "x", {"x": 2, "y": 1})


def test_latency_over_floor_skips_rows_without_a_floor():
    rows = [row("a", 2.0, floor=1.0), row("b", 6.0, floor=2.0), row("c", 1.0, floor=None),
            row("d", 1.0, floor="nan")]  # results files store non-finite floats as strings
    lof = scoring.latency_over_floor(rows)
    assert (lof["mean"], lof["n"], lof["min"], lof["max"]) == (2.5, 2, 2.0, 3.0)
    assert lof["geomean"] == pytest.approx(math.sqrt(6.0))


def test_summarize_picks_the_best_solution_and_keeps_all():
    rows = [row("a", 1.0, ref=8.0, solution="fast"), row("b", 2.0, ref=8.0, solution="fast"),
            row("a", 0.5, ref=8.0, solution="broken"),
            row("b", None, ref=8.0, status="RUNTIME_ERROR", solution="broken")]
    summary = scoring.summarize(rows)
    top = summary[DEF]
    assert top["solution"] == "fast"
    assert top["contest_score_vs_reference"] == pytest.approx(6.0)
    assert (top["passed"], top["total"]) == (2, 2)
    assert sorted(top["solutions"]) == ["broken", "fast"]
    assert top["solutions"]["broken"]["contest_score_vs_reference"] == 0.0
    assert top["solutions"]["broken"]["mean_speedup_vs_reference"] == 16.0  # passed rows only


def test_track_scores_halve_a_lone_dsa_kernel():
    summary = scoring.summarize([row("a", 1.0, ref=4.0)])
    assert scoring.track_scores(summary) == {"dsa": 2.0}


def test_launch_bound_rows_are_those_whose_gpu_waits_for_launches_inside_the_span():
    gpu = {"timing_method": "cupti-span (torch.profiler/kineto), cold L2, no CUDA graph"}
    gaps = {**row("a", 0.100), **gpu, "host_ms": 0.090, "idle_ms": 0.030}     # 30% of the span between launches
    one_kernel = {**row("b", 0.013), **gpu, "host_ms": 0.150, "idle_ms": 0.0}  # host-heavy, but one long kernel
    older = {**row("c", 0.040), **gpu, "host_ms": 0.036}    # no idle_ms: the host rule (90% of the span)
    older_slow = {**row("d", 0.250), **gpu, "host_ms": 0.030}
    failed = {**row("e", None, status="RUNTIME_ERROR"), **gpu, "host_ms": 0.05, "idle_ms": 0.05}
    cpu = {**row("f", 0.040), "timing_method": "wall-clock", "host_ms": 0.040}  # on a CPU the host time is the call
    assert scoring.launch_bound([gaps, one_kernel, older, older_slow, failed, cpu]) == [gaps, older]
    assert scoring.launch_bound([gaps], ratio=0.5) == []

"""The bound of the calls that were timed: the judge records each timed call's work (its own inputs' bytes and
FLOPs), and the bench's bound takes the probe's bandwidth and the matrix rate to those calls, trial by trial, as the
latency takes their spans (not to the baseline's one draw per trial: routing and row lengths are drawn per call)."""
import statistics
from types import SimpleNamespace

import pytest
import torch

from sdk import definitions
from sdk.bench import floors, probe
from sdk.bench.floors import Ceilings, Work
from sdk.bench.runner import make_row
from sdk.gate import contest_tolerance, gate_solution
from sdk.gate.judge import judge
from sdk.gate.pool import InputPool
from tests.helpers import INDEXER, small_indexer
from tests.test_interleave import PLAN, _baseline, _fake_worker

# A copy bandwidth of 10 bytes per ms: the tests' probe (10 bytes in 1 ms) streams at the copy rate, no fixed part.
CEILINGS = Ceilings(1e4, fp8_flops_per_s=1e15, bf16_flops_per_s=None)
H200 = Ceilings(4.2e12, fp8_flops_per_s=1.4e15, bf16_flops_per_s=None)


def _judge(call_work):
    spec = definitions.load(INDEXER)
    return judge(_fake_worker(spec, []), -1, _baseline().solution, spec, small_indexer(), plan=PLAN, seed=5,
                 tol=contest_tolerance(INDEXER), device=torch.device("cpu"), has_setup=False, fresh_worker=True,
                 call_work=call_work)


def test_judge_records_the_work_of_each_timed_call_from_its_own_inputs():
    out = _judge(lambda x: {"bytes": int(x["seq_lens"].sum()), "flops": 7})
    assert out.check.status == "PASSED" and out.call_work_error is None
    pool = InputPool(definitions.load(INDEXER), small_indexer(), 5, torch.device("cpu"), slots=2,
                     sets=PLAN.resident_sets(torch.device("cpu")))
    lens = [float(pool.private(pool.next_call())["seq_lens"].sum()) for _ in range(len(out.calls))]
    for record in out.calls:
        if record["timed"]:
            assert record["work"] == {"bytes": lens[record["index"]], "flops": 7.0}
        else:
            assert "work" not in record  # warmup calls are not measured
    assert len({r["work"]["bytes"] for r in out.calls if r["timed"]}) > 1  # the calls' row lengths differ


def test_a_failing_call_work_is_recorded_once_and_fails_no_solution():
    seen = []

    def broken(x):
        seen.append(1)
        raise ValueError("no model")

    out = _judge(broken)
    assert out.check.status == "PASSED" and seen == [1]
    assert out.call_work_error.startswith("call ") and "ValueError: no model" in out.call_work_error
    assert not any("work" in r for r in out.calls)


def test_gate_records_call_work_through_the_real_worker():
    (result,) = gate_solution(_baseline().solution, INDEXER, [small_indexer()], tol=contest_tolerance(INDEXER),
                              plan=PLAN, seed=3, call_work=lambda x: floors.call_work(INDEXER, x))
    assert result.passed, result.reason
    timed = [c for c in result.raw["calls"] if c["timed"]]
    assert timed and all(c["work"]["bytes"] > 0 and c["work"]["flops"] > 0 for c in timed)
    assert "call_work_error" not in result.raw


def _call(trial, nbytes, flops, timed=True, span=1.0):
    return {"trial": trial, "timed": timed, "span_ms": span, "wall_ms": span, "work": {"bytes": nbytes, "flops": flops}}


def test_timed_call_bounds_scale_the_probe_by_each_calls_bytes_and_take_its_flops():
    probed = Work(bytes=10, flops=0, matrix="fp8")
    calls = [_call(0, 20, 0), _call(0, 10, 3e12), _call(0, 10**6, 0, timed=False),  # warmup: left out
             _call(1, 5, 0), {**_call(1, 10**6, 0), "span_ms": None},            # no span: left out
             {"trial": 1, "timed": True, "span_ms": 1.0}]                         # no work recorded: left out
    got = probe.timed_call_bounds(calls, 1.0, probed, CEILINGS, "span_ms")
    # trial 0: median(20/10 x 1 ms, max(1 ms, 3e12 / 1e15 s)) = median(2, 3); trial 1: 5/10 x 1 ms
    assert got["bound_trials_ms"] == pytest.approx([2.5, 0.5])
    assert got["bound_ms"] == pytest.approx(1.5) and got["bound_calls"] == 3
    assert probe.timed_call_bounds([{"trial": 0, "timed": True, "span_ms": 1.0}], 1.0, probed, CEILINGS,
                                   "span_ms") is None


def test_a_probe_of_few_bytes_carries_its_fixed_cost_once_not_scaled_by_the_calls_bytes():
    # Session 8's MoE T=1: the probed draws routed no token to a local expert (40 KB in 2.2 us, launch-bound); the
    # timed calls stream one or two experts' weights (44 MB / 88 MB). Scaling the span gave a 1.4 ms bound to a
    # 40 us kernel; the bound is the fixed part once plus the bytes at the copy rate.
    probed = Work(bytes=40_000, flops=0, matrix="fp8")
    calls = [_call(0, 44e6, 1e8), _call(0, 88e6, 2e8), _call(0, 44e6, 1e8)]
    got = probe.timed_call_bounds(calls, 0.0022, probed, H200, "span_ms")
    floor = 44e6 / H200.hbm_bytes_per_s * 1e3
    assert floor < got["bound_ms"] < floor + 0.0022
    assert got["bound_ms"] == pytest.approx(0.0022 - 40_000 / 4.2e9 + floor)
    # a probe that streamed at 80% of the copy rate: 20% of its span is fixed; a call with twice its bytes is bound
    # at 1.8x the span (not 2x), one with half at 0.6x (never above the span itself)
    probed = Work(bytes=4.2e9, flops=0, matrix="fp8")
    twice = probe.timed_call_bounds([_call(0, 8.4e9, 0)], 1.25, probed, H200, "span_ms")["bound_ms"]
    half = probe.timed_call_bounds([_call(0, 2.1e9, 0)], 1.25, probed, H200, "span_ms")["bound_ms"]
    assert twice == pytest.approx(1.25 * 1.8) and half == pytest.approx(1.25 * 0.6)


def _row(calls, passed=True, draw_bytes=10):
    package = SimpleNamespace(name="sol", solution=SimpleNamespace(definition=INDEXER, hash=lambda: "h"))
    result = SimpleNamespace(raw={"calls": calls, "checked": 1}, passed=passed, status="PASSED" if passed else
                             "INCORRECT_NUMERICAL", reason="", workload=small_indexer())
    baseline = {"work": Work(bytes=draw_bytes, flops=0, matrix="fp8").as_dict(), "probe_ms": 1.0, "probe": {}}
    return make_row(package, result, baseline, CEILINGS, gpu=True)


def test_bench_row_bound_is_of_the_timed_calls_and_keeps_the_draws_bound_beside_it():
    row = _row([_call(t, nbytes, 0, span=5.0) for t in range(3) for nbytes in (30, 40, 50)])
    assert row["bound_basis"] == "timed calls" and row["bound_ms"] == pytest.approx(4.0)
    assert row["bound_trials_ms"] == pytest.approx([4.0] * 3) and row["bound_draws_ms"] == pytest.approx(1.0)
    assert row["latency_ms"] == pytest.approx(5.0)


def test_bench_row_without_recorded_work_keeps_the_bound_of_the_draws():
    row = _row([{"trial": t, "timed": True, "span_ms": 2.0, "wall_ms": 2.0} for t in range(3)])
    assert row["bound_basis"] == "baseline draws" and row["bound_ms"] == pytest.approx(1.0)
    assert statistics.fmean(row["latency_trials_ms"]) == pytest.approx(2.0)


def test_timed_call_floor_is_the_mean_of_each_trials_median_floor():
    calls = [_call(0, 20, 0), _call(0, 10, 3e13), _call(0, 40, 0), _call(0, 10**6, 0, timed=False),  # warmup: out
             _call(1, 5, 0), {"trial": 1, "timed": True, "span_ms": 1.0}]                         # no work: out
    got = floors.timed_call_floor(calls, "fp8", CEILINGS, "span_ms")
    # trial 0: median(20 / 10, max(10 / 10, 3e13 / 1e15 s = 30 ms), 40 / 10) = 4 ms; trial 1: 0.5 ms
    assert got["floor_trials_ms"] == pytest.approx([4.0, 0.5]) and got["floor_ms"] == pytest.approx(2.25)
    assert floors.timed_call_floor(calls[-1:], "fp8", CEILINGS, "span_ms") is None


def test_bench_row_floor_is_of_the_timed_calls_not_of_the_baseline_draws():
    # Session 18 (H100, MoE T = 1): the draws' floor (two of three routed tokens to three local experts, 29 us) was
    # above the latency of timed calls that mostly routed none; the check must compare the calls with their own work.
    honest = _row([_call(t, 10, 0, span=1.5) for t in range(3)], draw_bytes=100)   # calls' floor 1 ms, draws' 10
    assert honest["status"] == "PASSED" and honest["floor_basis"] == "timed calls"
    assert honest["floor_ms"] == pytest.approx(1.0) and honest["floor_draws_ms"] == pytest.approx(10.0)
    # the same check still fails a latency under its own calls' floor
    skipped = _row([_call(t, 100, 0, span=5.0) for t in range(3)], draw_bytes=10)  # calls' floor 10 ms
    assert skipped["status"] == "RUNTIME_ERROR" and "physical floor 10 ms" in skipped["reason"]
    assert skipped["latency_ms"] is None
    # without recorded work the floor stays the draws'
    plain = _row([{"trial": t, "timed": True, "span_ms": 2.0, "wall_ms": 2.0} for t in range(3)])
    assert "floor_basis" not in plain and plain["floor_ms"] == pytest.approx(1.0)

"""The references timed between a solution's trials: the judge's `between_trials` hook (order, inputs, failures,
deadline), the gate's raw record of it, and the bench rows built from it on CPU (and the old after-the-solutions
path: `--reference-after`, several devices, rows the interleaving could not cover)."""
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sdk import definitions, solutions
from sdk.bench import interleave
from sdk.bench import runner as bench_runner
from sdk.bench.config import BenchConfig
from sdk.bench.runner import reference_timing, row_reference, run_bench
from sdk.gate import CallPlan, contest_tolerance, gate_solution
from sdk.gate.judge import as_tuple, judge
from sdk.gate.pool import InputPool, same
from tests.helpers import INDEXER, cli_runner, small_indexer, write_package

BASELINE = "dsa_topk_indexer_torch_baseline"
RAISES = "def run(q, k, w, lens, table, out):\n    raise RuntimeError('boom')\n"


def _baseline():
    return next(p for p in solutions.discover() if p.name == BASELINE)


def _fake_worker(spec, events: list):
    """`ask` of an honest worker in this process: the reference on the shared inputs, written into the outputs."""
    reference = definitions.reference(spec.name)
    bound = {}

    def ask(msg: dict) -> dict:
        events.append((msg["op"], msg.get("index")))
        if msg["op"] == "bind":
            bound.update(slots=msg["slots"], sets=msg["sets"])
            return {"setup_ms": []}
        if msg["op"] == "call":
            light, outs = bound["slots"][msg["slot"]]
            values = {**light, **bound["sets"][msg["set"]]}
            got = as_tuple(reference(**{n: values[n].clone() if isinstance(values[n], torch.Tensor) else values[n]
                                        for n in spec.inputs}))
            for name, value in zip(spec.outputs, got):
                outs[name].copy_(value)
            return {"threads": 0, "tampered": [], "wall_ns": 1_000_000, "log": ""}
        return {}
    return ask


PLAN = CallPlan(trials=3, warmup=1, iters=2, checks=1)  # 3 calls per trial


def _judge(between, events, seed=5):
    spec, workload = definitions.load(INDEXER), small_indexer()
    # pid -1: no /proc entry, so the judge's OS thread count check is off for this in-process fake worker
    return judge(_fake_worker(spec, events), -1, _baseline().solution, spec, workload, plan=PLAN, seed=seed,
                 tol=contest_tolerance(INDEXER), device=torch.device("cpu"), has_setup=False, fresh_worker=True,
                 between_trials=between)


def test_judge_calls_between_trials_after_each_trial_with_fresh_private_inputs():
    events, drawn = [], []

    def between(trial, draw):
        events.append(("between", trial))
        args = draw()
        drawn.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()})
        for v in args.values():  # what it does to its inputs never reaches the judge's private copy
            if isinstance(v, torch.Tensor):
                v.zero_()
        return {"reference:fib-sdk": 10.0 + trial, "reference:official": 20.0 + trial}

    out = _judge(between, events)
    assert out.check.status == "PASSED", out.check.reason
    ops = [op if op != "call" else f"call#{index}" for op, index in events]
    # each trial's calls, then the hook; a draw takes one call of the pool, so trial 1 starts at index 4
    assert ops == ["bind", "call#0", "call#1", "call#2", "between", "call#4", "call#5", "call#6", "between",
                   "call#8", "call#9", "call#10", "between", "unbind"]
    assert [trial for op, trial in events if op == "between"] == [0, 1, 2]
    assert out.interleaved == [{"reference:fib-sdk": 10.0 + t, "reference:official": 20.0 + t} for t in range(3)]
    assert out.interleaved_error is None and len(out.calls) == 9
    # the draws are the private inputs of pool calls 3, 7, 11 (same seed, same workload): fresh, never repeated
    spec = definitions.load(INDEXER)
    pool = InputPool(spec, small_indexer(), 5, torch.device("cpu"), slots=2, sets=PLAN.resident_sets(
        torch.device("cpu")))
    expected = []
    for index in range(12):
        call = pool.next_call()
        if index in (3, 7, 11):
            expected.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in pool.private(call).items()})
    for got, want in zip(drawn, expected):
        assert all(same(got[n], want[n]) for n in spec.inputs)
    for name in ("q_index_fp8", "weights"):  # per-call inputs differ from trial to trial
        assert not same(drawn[0][name], drawn[1][name]) and not same(drawn[1][name], drawn[2][name])


def test_judge_without_between_trials_is_unchanged():
    events = []
    out = _judge(None, events)
    assert out.check.status == "PASSED" and out.interleaved == [] and out.interleaved_error is None
    assert [i for op, i in events if op == "call"] == list(range(9))  # consecutive: no draws between trials


def test_judge_a_raising_between_trials_is_recorded_once_and_not_called_again():
    events, trials = [], []

    def between(trial, draw):
        trials.append(trial)
        draw()
        if trial == 1:
            raise ValueError("reference broke")
        return {"reference:fib-sdk": 1.0}

    out = _judge(between, events)
    assert out.check.status == "PASSED" and len(out.calls) == 9  # every trial of the solution still ran
    assert trials == [0, 1] and out.interleaved == [{"reference:fib-sdk": 1.0}]
    assert out.interleaved_error == "trial 1: ValueError: reference broke"


def test_gate_records_between_trials_per_key_and_off_the_solutions_clock():
    """Through the real worker: the hook's results land in raw["interleaved_ms"]; its time (2 s per trial, 6 s in
    all) is not the solution's: a 3 s timeout is not hit."""
    import time

    seen = []

    def between(trial, draw):
        seen.append((trial, draw()["q_index_fp8"].shape))
        time.sleep(2.0)
        return {"reference:fib-sdk": 1.0 + trial}

    (result,) = gate_solution(_baseline().solution, INDEXER, [small_indexer()], tol=contest_tolerance(INDEXER),
                              timeout_s=3, plan=PLAN, seed=11, between_trials=between)
    assert result.status == "PASSED", result.reason
    assert [t for t, _ in seen] == [0, 1, 2] and seen[0][1] == (3, 64, 128)
    assert result.raw["interleaved_ms"] == {"reference:fib-sdk": [1.0, 2.0, 3.0]}
    assert result.raw["interleaved_s"] >= 6.0 and "interleaved_error" not in result.raw
    (plain,) = gate_solution(_baseline().solution, INDEXER, [small_indexer()], tol=contest_tolerance(INDEXER),
                             plan=PLAN, seed=11)
    assert plain.passed and "interleaved_ms" not in plain.raw


def _children_states() -> dict[int, str]:
    """State letter (R, S, T, ...) of each child process of this one (Linux /proc)."""
    import os

    from sdk.gate.runner import process_tree

    states = {}
    for pid in process_tree(os.getpid())[1:]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                states[pid] = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            pass
    return states


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux only)")
def test_gate_freezes_the_candidates_process_while_between_trials_runs():
    """A candidate's threads (a native one started at import is invisible to the per-call thread check) must not
    run while the references are timed: the worker is stopped for the hook's duration and continued after."""
    during = []

    def between(trial, draw):
        draw()
        during.append(_children_states())
        return {"reference:fib-sdk": 1.0}

    (result,) = gate_solution(_baseline().solution, INDEXER, [small_indexer()], tol=contest_tolerance(INDEXER),
                              plan=PLAN, seed=5, between_trials=between)
    assert result.status == "PASSED", result.reason
    assert len(during) == 3 and all("T" in states.values() for states in during), during
    assert "T" not in _children_states().values()  # nothing left stopped (the worker has exited or runs)


def test_gate_a_failing_between_trials_fails_no_solution_and_is_recorded():
    calls = []

    def between(trial, draw):
        calls.append(trial)
        draw()
        if len(calls) == 2:  # the first workload's trial 1 only
            raise RuntimeError("out of memory")
        return {"reference:fib-sdk": 5.0}

    first, second = gate_solution(_baseline().solution, INDEXER, [small_indexer("a"), small_indexer("b")],
                                  tol=contest_tolerance(INDEXER), plan=PLAN, seed=3, between_trials=between)
    assert first.status == second.status == "PASSED"
    assert first.raw["interleaved_error"] == "trial 1: RuntimeError: out of memory"
    assert first.raw["interleaved_ms"] == {"reference:fib-sdk": [5.0]}
    assert calls == [0, 1, 0, 1, 2]  # stopped for that workload only
    assert second.raw["interleaved_ms"] == {"reference:fib-sdk": [5.0] * 3} and "interleaved_error" not in second.raw


def test_the_judge_does_not_import_the_bench():
    code = ("import sys, sdk.gate.judge, sdk.gate.runner; "
            "sys.exit(1 if any(m.startswith('sdk.bench') for m in sys.modules) else 0)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(definitions.HERE.parent.parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


def test_row_reference_reads_the_graded_source_from_the_interleaved_trials():
    raw = {"interleaved_ms": {"reference:official": [10.0, 12.0, 14.0], "reference:fib-sdk": [1.0, 1.0, 1.0]}}
    baseline = {"reference_latency_ms": 99.0, "reference_trials_ms": [99.0], "reference_source": "official"}
    got = row_reference(raw, baseline)
    assert got["reference_timing"] == "interleaved" and got["reference_source"] == "official"
    assert got["reference_latency_ms"] == 12.0 and got["reference_trials_ms"] == [10.0, 12.0, 14.0]
    assert got["reference_aa_pct"] == pytest.approx(4 / 12 * 100)
    assert got["references_ms"] == {"official": 12.0, "fib-sdk": 1.0}
    own = row_reference({"interleaved_ms": {"reference:fib-sdk": [2.0, 4.0]}}, {})
    assert own["reference_source"] == "fib-sdk" and own["reference_latency_ms"] == 3.0
    # a failed interleaving falls back to the references timed after the solutions, and says why
    failed = row_reference({**raw, "interleaved_error": "trial 1: boom"}, baseline)
    assert failed["reference_timing"] == "after" and failed["reference_latency_ms"] == 99.0
    assert failed["reference_interleave_error"] == "trial 1: boom"
    none = row_reference({}, {})
    assert none["reference_timing"] is None and none["reference_trials_ms"] == [] and none["references_ms"] == {}


def test_reference_timing_interleaves_only_on_one_device_with_the_reference_on():
    on = BenchConfig()
    assert reference_timing(on, 1)[0] is True and reference_timing(on, 1)[1].startswith("interleaved")
    for config, devices, why in [(on, 2, "2 devices"), (BenchConfig(interleave_reference=False), 1,
                                                         "--reference-after"),
                                 (BenchConfig(baseline_every=2), 1, "--baseline-every")]:
        interleaving, text = reference_timing(config, devices)
        assert interleaving is False and text.startswith(interleave.AFTER_TEXT) and why in text
    assert reference_timing(BenchConfig(reference=False), 1) == (False, "not timed (--no-reference)")


def _spy_baselines(monkeypatch) -> list:
    seen = []
    real = bench_runner.time_baselines

    def spy(*args, **kw):
        seen.append(kw["time_references"])
        return real(*args, **kw)
    monkeypatch.setattr(bench_runner, "time_baselines", spy)
    return seen


CONFIG = BenchConfig(trials=3, warmup=1, iters=3, checks=1, peers=False, reference_iters=2)


def test_bench_rows_take_the_reference_from_each_solutions_own_trials(monkeypatch, tmp_path):
    seen = _spy_baselines(monkeypatch)
    lines = []
    results, _ = run_bench([_baseline()], CONFIG, out_dir=None, workload_sets={INDEXER: [small_indexer()]},
                           progress=lines.append)
    (row,) = results["rows"]
    assert row["status"] == "PASSED" and row["reference_timing"] == "interleaved"
    assert len(row["reference_trials_ms"]) == 3 == len(row["latency_trials_ms"])
    trials = row["reference_trials_ms"]
    assert row["reference_latency_ms"] == pytest.approx(statistics.fmean(trials)) and min(trials) > 0
    assert row["reference_aa_pct"] == pytest.approx((max(trials) - min(trials)) / statistics.fmean(trials) * 100)
    assert row["reference_source"] == "fib-sdk" and row["references_ms"] == {"fib-sdk": row["reference_latency_ms"]}
    assert seen == [False]  # the baselines ran (work, floors) but did not time the reference again
    assert row["work"]["bytes"] > 0
    env = results["environment"]
    assert env["reference_timing"].startswith("interleaved") and env["reference_timing_methods"] == [
        "wall-clock (cpu device)"]
    assert any("interleaved" in line and "reference" in line for line in lines)
    band = results["summary"][INDEXER]["mean_speedup_band"]
    assert band is not None and band[0] <= row["reference_latency_ms"] / row["latency_ms"] <= band[1]


def test_bench_a_row_without_interleaved_trials_gets_the_reference_timed_after(monkeypatch, tmp_path):
    seen = _spy_baselines(monkeypatch)
    broken = solutions.load_package(write_package(tmp_path / "broken", INDEXER, RAISES, name="broken"))
    results, _ = run_bench([_baseline(), broken], CONFIG, out_dir=None, workload_sets={INDEXER: [small_indexer()]},
                           progress=lambda line: None)
    rows = {r["solution"]: r for r in results["rows"]}
    assert rows["broken"]["status"] == "RUNTIME_ERROR" and rows["broken"]["reference_timing"] == "after"
    assert len(rows["broken"]["reference_trials_ms"]) == 3 and rows["broken"]["reference_latency_ms"] > 0
    assert rows[BASELINE]["reference_timing"] == "interleaved"
    assert rows[BASELINE]["reference_trials_ms"] != rows["broken"]["reference_trials_ms"]  # timed separately
    assert seen == [True]


def test_bench_reference_after_keeps_the_old_path(monkeypatch):
    seen = _spy_baselines(monkeypatch)
    config = CONFIG.model_copy(update={"interleave_reference": False})
    results, _ = run_bench([_baseline()], config, out_dir=None, workload_sets={INDEXER: [small_indexer()]},
                           progress=lambda line: None)
    (row,) = results["rows"]
    assert row["status"] == "PASSED" and row["reference_timing"] == "after" and seen == [True]
    assert len(row["reference_trials_ms"]) == 3 and row["reference_latency_ms"] > 0
    assert "--reference-after" in results["environment"]["reference_timing"]
    assert "reference_timing_methods" not in results["environment"]
    none, _ = run_bench([_baseline()], CONFIG.model_copy(update={"reference": False}), out_dir=None,
                        workload_sets={INDEXER: [small_indexer()]}, progress=lambda line: None)
    (row,) = none["rows"]
    assert row["reference_timing"] is None and row["reference_latency_ms"] is None and row["reference_trials_ms"] == []


def test_cli_reference_after_flag(monkeypatch, tmp_path):
    from sdk.cli import main

    seen = []

    def fake_run_bench(packages, config, **kw):
        seen.append(config.interleave_reference)
        return {"rows": [], "summary": {}, "environment": {}}, None
    monkeypatch.setattr(bench_runner, "run_bench", fake_run_bench)
    package = write_package(tmp_path / "pkg", INDEXER, RAISES)
    for extra in ([], ["--reference-after"]):
        cli_runner().invoke(main, ["bench", str(package), "--out", str(tmp_path), *extra])
    assert seen == [True, False]

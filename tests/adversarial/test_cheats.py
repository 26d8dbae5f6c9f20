"""Each hostile package goes through the real gate (its own worker process) and is rejected for a named reason.

Packages the static scan catches are also run with scan=False where a runtime defence exists, so both layers are
shown to hold on their own. Cheats that only a GPU can express (side streams, the CUDA caching allocator, an
illegal access) are the `gpu` tests at the end.
"""
import math

import pytest
import torch

from sdk import solutions
from sdk.gate.compare import Tolerance, error_stats
from tests.adversarial.support import TIMING, gate, long_indexer, package, scan_rules, tiny_attention, tiny_indexer

STALE_OUTPUT = ("trial 0: output: contains NaN", "trial 0: output: contains inf", "trial 0: output: matched ratio",
                "trial 0: lse: contains", "trial 0: lse: matched ratio")

# What the static scan must find in each package (empty: the cheat is built to pass the scan, a runtime defence
# catches it).
SCAN = {
    "empty_return": set(), "leftover_read": set(), "partial_write": set(), "nan_output": set(),
    "mutates_inputs": set(), "shape_special_case": set(),
    "deferred_thread": {"forbidden-import"},
    "trial_zero_only": {"global-state"},
    "converted_once": {"global-state"},
    "ptr_cache": {"pointer-key", "global-state"},
    "late_cache": {"pointer-key", "global-state"},
    "timer_patch": {"monkey-patch"},
    "side_stream": {"cuda-stream"},
    "calls_reference": {"forbidden-import"},
    "steals_reference": {"introspection"},
    "reads_reference_file": {"file-access", "dynamic-code"},
    "cpu_roundtrip": {"host-compute"},
    "crash_by_shape": {"forbidden-import"},
    "declared_cache": set(),
    "judge_memory": {"file-access", "process"},  # the OS refuses it too: tests/test_isolation.py
}


def test_every_hostile_package_is_listed_and_scans_as_expected():
    on_disk = {p.root.name for p in solutions.discover(package("ptr_cache").root.parent)}
    assert set(SCAN) <= on_disk
    for name, expected in SCAN.items():
        found = scan_rules(name)
        assert expected <= found and (found or not expected), (name, found)
        if not expected:
            assert found == set(), (name, found)


@pytest.mark.parametrize("name,rule", [("calls_reference", "forbidden-import"), ("steals_reference", "introspection"),
                                       ("reads_reference_file", "suspicious-string"), ("cpu_roundtrip", "host-compute"),
                                       ("side_stream", "cuda-stream"), ("timer_patch", "monkey-patch")])
def test_scan_rejects_before_building(name, rule, tmp_path):
    """Calling the reference, host computation, side streams, patched timers: refused by the gate's scan, for
    every workload, without a worker (no build, no device time); the traces say why."""
    solution = package(name).solution
    workloads = [tiny_attention(1, "w1"), tiny_attention(2, "w2")] if "attention" in solution.definition else \
        [tiny_indexer("w1"), tiny_indexer("w2")]
    results = gate(name, workloads, trace_path=tmp_path / "traces.jsonl")
    assert [r.status for r in results] == ["RUNTIME_ERROR"] * 2
    assert all(r.reason.startswith(f"static scan: {rule} at main.py:") for r in results), results[0].reason
    assert "static scan" in results[0].trace.evaluation.log
    assert "latency_ms" not in results[0].raw  # nothing ran


def test_reading_freed_memory_fails():
    """The candidate runs before the reference of its trial, so no fresh reference result sits in freed memory
    (with the reference first, this package copied the reference's exact output on CPU). empty_return, the
    value-returning variant, runs in the GPU list below, where the caching allocator makes it bite."""
    (result,) = gate("leftover_read")
    assert result.status == "INCORRECT_NUMERICAL", result.reason
    assert result.reason.startswith(STALE_OUTPUT), result.reason


def test_partial_write_is_caught_by_poisoned_outputs():
    (result,) = gate("partial_write", trials=1)
    assert result.status == "INCORRECT_NUMERICAL"
    assert result.reason == "trial 0: output: contains NaN (or was left unwritten)"


def test_nan_outputs_fail_although_the_tolerance_rule_alone_would_accept_them():
    ref = torch.randn(64)
    assert error_stats(torch.full_like(ref, math.nan), ref, Tolerance())["matched_ratio"] == 1.0  # the loophole
    (result,) = gate("nan_output", trials=1)
    assert (result.status, result.reason) == ("INCORRECT_NUMERICAL",
                                              "trial 0: output: contains NaN (or was left unwritten)")


def test_input_mutation_is_caught():
    (result,) = gate("mutates_inputs", trials=1)
    assert (result.status, result.reason) == ("RUNTIME_ERROR",
                                              "trial 0: the solution modified its input(s) ['weights']")


def test_work_left_on_a_thread_is_caught_at_runtime():
    (result,) = gate("deferred_thread", scan=False, trials=1)
    assert result.status == "RUNTIME_ERROR"
    assert "left thread(s) running after it returned" in result.reason


def test_patched_timers_are_caught_at_runtime():
    (result,) = gate("timer_patch", scan=False, trials=1)
    assert result.status == "RUNTIME_ERROR"
    for name in ("time.perf_counter", "torch.cuda.Event.elapsed_time", "torch.cuda.synchronize"):
        assert name in result.reason


@pytest.mark.parametrize("name", ["ptr_cache", "converted_once"])
def test_caches_across_calls_fail_on_the_second_trial(name):
    """Calls alternate between two slots of input tensors, refilled with fresh values (trial 2 gets trial 0's
    objects and addresses back): identity-, pointer- and shape-keyed caches replay a stale answer, and keys
    converted once miss the pages re-drawn since. Run without the scan, which catches them first, on rows well past
    top-k, where stale keys change the answer. (trial_zero_only, an output cache keyed by shape, runs in the GPU
    list.)"""
    (result,) = gate(name, [long_indexer()], scan=False, trials=3)
    assert result.status == "INCORRECT_NUMERICAL", result.reason
    assert result.reason.startswith(("trial 1: ", "trial 2: ")), result.reason


def test_shape_special_case_fails_on_the_other_shape():
    results = gate("shape_special_case", [tiny_attention(1), tiny_attention(2)])
    assert [r.status for r in results] == ["PASSED", "INCORRECT_NUMERICAL"], [r.reason for r in results]
    assert results[1].reason.startswith("trial 0: "), results[1].reason


def test_cache_that_starts_after_the_first_calls_is_caught_in_the_timed_calls():
    """late_cache is honest for its first 4 calls (what a gate used to check), then returns at once: a timer
    would time a no-op. Timed calls are gate calls here: some are checked, chosen after each call."""
    plan = TIMING.model_copy(update={"iters": 12, "checks": 12})
    (result,) = gate("late_cache", scan=False, plan=plan)
    assert result.status == "INCORRECT_NUMERICAL", result.reason
    assert result.reason.startswith("trial ") and " call " in result.reason, result.reason
    assert result.trace.evaluation.performance is None  # no latency is reported for it


def test_declared_shape_cache_passes_timing():
    """A cache keyed on shapes only (declared) stays correct whatever the content: timed calls pass their checks."""
    (result,) = gate("declared_cache", plan=TIMING)
    assert result.status == "PASSED", result.reason
    assert result.raw["checked"] >= 2 and len([c for c in result.raw["calls"] if c["timed"]]) == 8


# ---- GPU: the same cheats where the CUDA caching allocator, streams and CUPTI make them bite ------------------------

GPU_EXPECTED = {"empty_return": "INCORRECT_NUMERICAL", "leftover_read": "INCORRECT_NUMERICAL",
                "partial_write": "INCORRECT_NUMERICAL", "nan_output": "INCORRECT_NUMERICAL",
                "ptr_cache": "INCORRECT_NUMERICAL", "trial_zero_only": "INCORRECT_NUMERICAL",
                "converted_once": "INCORRECT_NUMERICAL", "mutates_inputs": "RUNTIME_ERROR",
                "deferred_thread": "RUNTIME_ERROR", "timer_patch": "RUNTIME_ERROR"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_EXPECTED))
def test_memory_cache_and_tampering_cheats_fail_on_gpu(name):
    (result,) = gate(name, device="cuda", scan=False, trials=3)  # trial 2 gets trial 0's tensors back
    assert result.status == GPU_EXPECTED[name], result.reason


@pytest.mark.gpu
def test_late_cache_is_caught_after_cupti_timing():
    plan = TIMING.model_copy(update={"iters": 12, "checks": 12, "profile": True})
    (result,) = gate("late_cache", device="cuda", scan=False, plan=plan)
    assert result.status == "INCORRECT_NUMERICAL", result.reason


@pytest.mark.gpu
def test_side_stream_work_is_still_timed():
    """With scan=False the side-stream solution is correct (the gate's synchronize is device-wide), and CUPTI
    counts the kernels it launched on its private stream: its latency is not far below the same function run on
    the default stream. (The first H200 run compared against another solution's code path, which overlapped
    differently and measured 0.74 vs 1.33 ms; this form compares the solution's own `_attend`. It was rewritten
    after that run and has not run on a GPU since.)"""
    import importlib.util

    import torch

    from sdk import definitions, inputs
    from sdk.bench import stats
    from sdk.bench.timing import time_call

    workload = [tiny_attention(1, "side-stream")]
    plan = TIMING.model_copy(update={"warmup": 5, "iters": 20, "profile": True})
    (side,) = gate("side_stream", workload, device="cuda", scan=False, plan=plan)
    assert side.status == "PASSED", side.reason
    spec = importlib.util.spec_from_file_location("side_stream_main",
                                                  package("side_stream").source_dir / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    d = definitions.load(package("side_stream").solution.definition)
    args = inputs.make_inputs(d, workload[0], seed=0, trial=1000, device="cuda")
    outs = inputs.alloc_outputs(d, workload[0], "cuda", poison=False)
    plain = time_call(lambda: module._attend(*args.values(), *outs.values()), torch.device("cuda"), warmup=5, iters=20)
    latency = stats.latency(side.raw["calls"], gpu=True)["latency_ms"]
    assert latency >= 0.5 * plain.median_ms, (latency, plain)

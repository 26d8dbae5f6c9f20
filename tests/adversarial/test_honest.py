"""The defences do not reject honest work: a baseline passes scan, gate, timing and the post-timing probe; the
bench row flags latencies below the physical floor and carries a declared cache's cold latency."""
from types import SimpleNamespace

import torch

from sdk import solutions
from sdk.bench import floors
from sdk.bench.runner import _row
from sdk.gate import gate_solution
from tests.adversarial.support import TIMING, tiny_attention


def test_attention_baseline_passes_scan_gate_timing_and_probe():
    package = next(p for p in solutions.discover() if p.name == "dsa_sparse_attention_torch_baseline")
    (result,) = gate_solution(package.solution, package.solution.definition, [tiny_attention(2)], trials=2,
                              device="cpu", timing=TIMING)
    assert result.status == "PASSED", result.reason
    bench = result.raw["bench"]
    assert bench["latency_ms"] > 0 and "rejected" not in bench and "declared_cache" not in bench


def _result(latency_ms, declared=None):
    work = floors.Work(bytes=10**9, flops=0, matrix="bf16").as_dict()  # 1 GB: 1 ms at 1 TB/s
    bench = {"latency_ms": latency_ms, "work": work, "peers": {}}
    if declared:
        bench.update(declared_cache=declared, cold_latency_ms=2 * latency_ms)
    workload = tiny_attention(1)
    return SimpleNamespace(workload=workload, status="PASSED", reason="", raw={"bench": bench})


def test_bench_row_flags_latency_below_the_floor():
    package = next(p for p in solutions.discover() if p.name == "dsa_sparse_attention_torch_baseline")
    ceilings = floors.Ceilings(hbm_bytes_per_s=1e12, fp8_flops_per_s=None, bf16_flops_per_s=None)
    fast = _row(package, _result(0.01), None, ceilings)
    assert fast["floor_ms"] == 1.0 and fast["implausible"] is True
    honest = _row(package, _result(1.5, declared="ramps"), None, ceilings)
    assert honest["implausible"] is False
    assert (honest["declared_cache"], honest["cold_latency_ms"]) == ("ramps", 3.0)
    assert _row(package, _result(0.01), None, None)["implausible"] is False  # no ceilings measured: no floor


def test_guards_ignore_torch_own_lazy_work_and_name_real_patches(monkeypatch):
    """The runtime guard must not fire on what honest runs do (profiling, JIT-extension imports), and must name
    what a solution replaced."""
    import importlib
    import time

    from torch.profiler import ProfilerActivity, profile, record_function

    from sdk.gate import guards

    guards.arm()
    try:
        importlib.import_module("torch.utils.cpp_extension")  # what every CUDA solution's jit_build imports
        with profile(activities=[ProfilerActivity.CPU]), record_function("fib-sdk-test"):
            assert float(torch.ones(4).sum()) == 4.0
        assert guards.tampered() == []
        monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
        assert guards.tampered() == ["time.perf_counter"]
    finally:
        guards._BASELINE = None  # unarmed again for other in-process tests

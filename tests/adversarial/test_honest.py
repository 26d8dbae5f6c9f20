"""The defences do not reject honest work: a baseline passes scan, gate and timed calls (some of them checked);
the bench row rejects latencies below the physical floor."""
from types import SimpleNamespace

import torch

from sdk import solutions
from sdk.bench import floors
from sdk.bench.runner import make_row
from sdk.gate import gate_solution
from tests.adversarial.support import TIMING, tiny_attention


def test_attention_baseline_passes_scan_gate_and_checked_timed_calls():
    package = next(p for p in solutions.discover() if p.name == "dsa_sparse_attention_torch_baseline")
    (result,) = gate_solution(package.solution, package.solution.definition, [tiny_attention(2)], device="cpu",
                              plan=TIMING)
    assert result.status == "PASSED" and result.strict_passed, result.reason
    timed = [c for c in result.raw["calls"] if c["timed"]]
    assert len(timed) == TIMING.trials * TIMING.iters and all(c["wall_ms"] > 0 for c in timed)
    assert result.raw["checked"] >= TIMING.trials  # at least the first call of each trial


def _result(latency_ms):
    calls = [{"index": i, "trial": 0, "timed": True, "wall_ms": latency_ms, "checked": False} for i in range(3)]
    return SimpleNamespace(workload=tiny_attention(1), status="PASSED", reason="", passed=True,
                           raw={"calls": calls, "strict": {"passed": True, "reason": ""}, "checked": 1})


def test_bench_row_rejects_latency_below_the_floor():
    package = next(p for p in solutions.discover() if p.name == "dsa_sparse_attention_torch_baseline")
    ceilings = floors.Ceilings(hbm_bytes_per_s=1e12, fp8_flops_per_s=None, bf16_flops_per_s=None)
    baseline = {"work": floors.Work(bytes=10**9, flops=0, matrix="bf16").as_dict()}  # 1 GB: 1 ms at 1 TB/s
    fast = make_row(package, _result(0.01), baseline, ceilings, gpu=False)
    assert fast["floor_ms"] == 1.0 and fast["implausible"] is True
    assert fast["status"] == "RUNTIME_ERROR" and fast["latency_ms"] is None and "physical floor" in fast["reason"]
    honest = make_row(package, _result(1.5), baseline, ceilings, gpu=False)
    assert honest["implausible"] is False and honest["latency_ms"] == 1.5 and honest["status"] == "PASSED"
    assert make_row(package, _result(0.01), baseline, None, gpu=False)["implausible"] is False  # no ceilings


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

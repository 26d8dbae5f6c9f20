"""Isolation: every solution builds and runs in its own worker process under a timeout; a segfault, a hang, an
illegal memory access or a failed build becomes a status with a reason, and the next workload still runs.

The fixtures are packages in tests/adversarial/ (crash_by_shape misbehaves by the number of query tokens: 1
segfaults, 2 hangs, 4 makes an illegal access on CUDA, any other count computes honestly; crash_import's build
fails). crash_by_shape imports ctypes, which the static scan refuses, so its runs pass scan=False.
"""
import pytest

from sdk import solutions
from sdk.gate import gate_solution
from tests.adversarial.support import gate, tiny_attention
from tests.helpers import ATTENTION, write_package

# Kept out of the repository as a file: a .py that does not parse would break every linter run over tests/.
DOES_NOT_PARSE = "def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)\n    pass\n"


def test_segfault_and_hang_are_contained_and_the_run_goes_on():
    results = gate("crash_by_shape", [tiny_attention(1), tiny_attention(2), tiny_attention(3)], scan=False,
                   timeout_s=6, trials=1)
    assert [r.status for r in results] == ["RUNTIME_ERROR", "TIMEOUT", "PASSED"], [r.reason for r in results]
    assert results[0].reason == "worker died (exit code -11)"  # SIGSEGV
    assert results[1].reason == "no result within 6 s"
    assert results[0].trace.evaluation.status.value == "RUNTIME_ERROR"


def test_the_scan_refuses_the_crashing_package_without_running_it():
    (result,) = gate("crash_by_shape", [tiny_attention(1)])
    assert result.status == "RUNTIME_ERROR"
    assert result.reason.startswith("static scan: forbidden-import at main.py:"), result.reason


@pytest.mark.parametrize("name,error", [("syntax", "SyntaxError"),
                                        ("crash_import", "ModuleNotFoundError: No module named 'fib_sdk_no_such_module'")])
def test_build_failures_are_compile_errors_for_every_workload(tmp_path, name, error):
    workloads = [tiny_attention(1), tiny_attention(3)]
    if name == "syntax":
        solution = solutions.load_package(write_package(tmp_path, ATTENTION, DOES_NOT_PARSE)).solution
        results = gate_solution(solution, ATTENTION, workloads, trials=1, device="cpu")
    else:
        results = gate(name, workloads, trials=1)
    assert [r.status for r in results] == ["COMPILE_ERROR", "COMPILE_ERROR"]
    assert results[0].reason.startswith(error) and "\n" not in results[0].reason, results[0].reason
    assert results[1].reason == results[0].reason  # built once: the second workload reuses the failure
    assert "Traceback" in results[0].trace.evaluation.log  # the build's own output travels in the trace


@pytest.mark.gpu
def test_illegal_memory_access_is_contained_and_the_run_goes_on():
    results = gate("crash_by_shape", [tiny_attention(4), tiny_attention(3)], scan=False, device="cuda",
                   timeout_s=120, trials=1)
    assert [r.status for r in results] == ["RUNTIME_ERROR", "PASSED"], [r.reason for r in results]
    assert "illegal memory access" in results[0].reason or "CUDA error" in results[0].reason, results[0].reason

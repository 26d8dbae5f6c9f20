"""Isolation: every solution builds and runs in its own worker process under a timeout; a segfault, a hang, an
illegal memory access or a failed build becomes a status with a reason, and the next workload still runs.

The fixtures are packages in tests/adversarial/ (crash_by_shape misbehaves by the number of query tokens: 1
segfaults, 2 hangs, 4 makes an illegal access on CUDA, any other count computes honestly; crash_import's build
fails). crash_by_shape imports ctypes, which the static scan refuses, so its runs pass scan=False.
"""
import contextlib
import multiprocessing
import os
import sys

import pytest

from sdk import solutions
from sdk.gate import gate_solution, isolation
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


# ---- the judge's memory out of the worker's reach ----------------------------------------------------------------

LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the ptrace locks are Linux's (prctl, "
                           "capabilities); elsewhere isolation is a no-op and this test has nothing to check")


def _open_parent_memory(drop: bool, answer) -> None:
    if drop:
        answer.put(("problems", isolation.drop_ptrace()))
    try:
        with open(f"/proc/{os.getppid()}/mem", "rb", buffering=0):
            answer.put(("opened", None))
    except OSError as exc:
        answer.put(("refused", type(exc).__name__))


def _child_opens_parent_memory(drop: bool, protect: bool) -> list:
    ctx = multiprocessing.get_context("spawn")
    answer = ctx.Queue()
    with isolation.judge_protected() if protect else contextlib.nullcontext():
        child = ctx.Process(target=_open_parent_memory, args=(drop, answer))
        child.start()
        child.join(60)
    return [answer.get(timeout=5) for _ in range(2 if drop else 1)]


@LINUX
def test_a_child_that_dropped_ptrace_cannot_open_its_protected_parents_memory():
    got = _child_opens_parent_memory(drop=True, protect=True)
    assert got[0] == ("problems", []), got  # no_new_privs and CAP_SYS_PTRACE out of every set
    assert got[1] == ("refused", "PermissionError"), got


@LINUX
def test_without_the_locks_the_same_child_opens_it_here():
    """The control: what the locks stop is possible on this machine (root, or no Yama restriction) -- skipped where
    the OS refuses it already."""
    got = _child_opens_parent_memory(drop=False, protect=False)
    if got[0][0] == "refused":
        pytest.skip(f"this machine already refuses a child its parent's memory ({got[0][1]}): nothing to contrast")
    assert got[0] == ("opened", None)


@LINUX
def test_protection_nests_and_restores_the_dumpable_flag():
    assert isolation.dumpable() == 1
    with isolation.judge_protected():
        with isolation.judge_protected():
            assert isolation.dumpable() == 0
        assert isolation.dumpable() == 0
    assert isolation.dumpable() == 1


@LINUX
def test_gate_worker_cannot_write_the_judges_memory():
    """judge_memory tries at import; the scan refuses it first (file access built at run time, the parent's pid),
    so it runs with scan=False to show the OS layer alone holds."""
    (scanned,) = gate("judge_memory", trials=1)
    assert scanned.status == "RUNTIME_ERROR" and scanned.reason.startswith("static scan: "), scanned.reason
    (result,) = gate("judge_memory", scan=False, trials=1)
    assert result.status == "RUNTIME_ERROR", result.reason
    assert result.reason.endswith("judge memory: refused (PermissionError)"), result.reason
    assert "isolation" not in result.raw  # every lock held (a failed one would be listed there)
    assert isolation.dumpable() == 1  # restored once the worker is gone


@pytest.mark.gpu
def test_illegal_memory_access_is_contained_and_the_run_goes_on():
    results = gate("crash_by_shape", [tiny_attention(4), tiny_attention(3)], scan=False, device="cuda",
                   timeout_s=120, trials=1)
    assert [r.status for r in results] == ["RUNTIME_ERROR", "PASSED"], [r.reason for r in results]
    assert "illegal memory access" in results[0].reason or "CUDA error" in results[0].reason, results[0].reason

"""The gate on CPU with small workloads of the real definitions: honest baselines pass, each defect gets its status."""
import json
import math

import pytest
import torch

from sdk import jsonl, solutions
from sdk._fib import Trace
from sdk.gate import contest_tolerance, gate_solution
from tests.helpers import ATTENTION, INDEXER, MOE, small, small_attention, small_indexer, write_package

REF = "from sdk.definitions import reference as _r\n"  # test-only: solutions in these tests may cheat


def _gate(solution, definition, wls, **kw):
    kw.setdefault("timeout_s", 120)
    return gate_solution(solution, definition, wls, trials=kw.pop("trials", 2), tol=contest_tolerance(definition), **kw)


@pytest.mark.parametrize("definition,wls", [
    (INDEXER, [small_indexer(), small_indexer("short-rows", batch_size=5, max_num_pages=4, num_pages=60)]),
    (ATTENTION, [small_attention(), small_attention("one-token", num_tokens=1, num_pages=40)]),
])
def test_torch_baselines_pass(tmp_path, definition, wls):
    package = next(p for p in solutions.discover() if p.solution.definition == definition and "baseline" in p.name)
    traces = tmp_path / "traces.jsonl"
    results = _gate(package.solution, definition, wls, trace_path=traces)
    assert [r.status for r in results] == ["PASSED", "PASSED"], [r.reason for r in results]
    lines = list(jsonl.read(traces))
    assert len(lines) == 2
    for line in lines:
        trace = Trace.model_validate_json(line)
        assert trace.evaluation.status.value == "PASSED" and trace.solution == package.name
        assert trace.evaluation.correctness.extra["matched_ratio"] == 1.0


@pytest.mark.slow
def test_moe_baseline_passes_small_batch():
    package = next(p for p in solutions.discover() if p.solution.definition == MOE and "baseline" in p.name)
    (result,) = _gate(package.solution, MOE, [small(MOE, "moe-t4", seq_len=4)], trials=1, timeout_s=600)
    assert result.status == "PASSED", result.reason
    assert result.raw["extra"]["passes_at_0.95"] is True


BAD = {
    "INCORRECT_SHAPE": "def run(q, k, w, lens, table):\n    import torch\n    return torch.zeros(1, dtype=torch.int32)\n",
    "INCORRECT_DTYPE": "def run(q, k, w, lens, table):\n    import torch\n"
                       "    return torch.zeros(q.shape[0], 2048, dtype=torch.int64)\n",
    "RUNTIME_ERROR": "def run(q, k, w, lens, table):\n    raise RuntimeError('boom')\n",
    "COMPILE_ERROR": "def run(q, k, w, lens, table:\n",
}


@pytest.mark.parametrize("status", sorted(BAD))
def test_each_defect_gets_its_status_and_a_one_line_reason(tmp_path, status):
    package = solutions.load_package(write_package(tmp_path, INDEXER, BAD[status], destination_passing_style=False))
    results = _gate(package.solution, INDEXER, [small_indexer("a"), small_indexer("b")])
    assert [r.status for r in results] == [status, status]
    assert results[0].reason and "\n" not in results[0].reason


def test_unwritten_output_and_nan_fail(tmp_path):
    untouched = solutions.load_package(write_package(tmp_path / "a", ATTENTION,
                                                     "def run(q, p, c, k, i, s, out, lse):\n    lse.zero_()\n"))
    (r,) = _gate(untouched.solution, ATTENTION, [small_attention()])
    assert r.status == "INCORRECT_NUMERICAL" and "NaN" in r.reason


def test_input_mutation_is_caught(tmp_path):
    src = REF + "def run(q, k, w, lens, table, out):\n    out.copy_(_r('" + INDEXER + "')(q, k, w, lens, table)[0])\n" \
        "    w.zero_()\n"
    package = solutions.load_package(write_package(tmp_path, INDEXER, src))
    (r,) = _gate(package.solution, INDEXER, [small_indexer()], scan=False)  # the scan would refuse `sdk` first
    assert r.status == "RUNTIME_ERROR" and "modified its input" in r.reason and "weights" in r.reason


def test_hang_times_out_and_the_run_goes_on(tmp_path):
    src = REF + "import time\ndef run(q, k, w, lens, table, out):\n" \
        "    if int(lens.numel()) == 3:\n        time.sleep(600)\n" \
        "    out.copy_(_r('" + INDEXER + "')(q, k, w, lens, table)[0])\n"
    package = solutions.load_package(write_package(tmp_path, INDEXER, src))
    results = _gate(package.solution, INDEXER, [small_indexer("hangs"), small_indexer("fine", batch_size=2)],
                    timeout_s=20, trials=1, scan=False)
    assert [r.status for r in results] == ["TIMEOUT", "PASSED"], [r.reason for r in results]


def test_crash_becomes_runtime_error_and_the_run_goes_on(tmp_path):
    src = REF + "import os\ndef run(q, k, w, lens, table, out):\n" \
        "    if int(lens.numel()) == 3:\n        os._exit(3)\n" \
        "    out.copy_(_r('" + INDEXER + "')(q, k, w, lens, table)[0])\n"
    package = solutions.load_package(write_package(tmp_path, INDEXER, src))
    results = _gate(package.solution, INDEXER, [small_indexer("dies"), small_indexer("fine", batch_size=2)], trials=1,
                    scan=False)
    assert [r.status for r in results] == ["RUNTIME_ERROR", "PASSED"]
    assert "exit code 3" in results[0].reason


def test_trace_lines_survive_inf_errors(tmp_path):
    src = "def run(q, k, w, lens, table, out):\n    out.fill_(0)\n"  # duplicates: inf error in the trace
    package = solutions.load_package(write_package(tmp_path, INDEXER, src))
    traces = tmp_path / "t.jsonl"
    (r,) = _gate(package.solution, INDEXER, [small_indexer()], trace_path=traces)
    assert r.status == "INCORRECT_NUMERICAL"
    (line,) = list(jsonl.read(traces))
    assert json.loads(line)["evaluation"]["correctness"]["max_absolute_error"] in ("inf", "Infinity")
    Trace.model_validate_json(line)


def test_first_workload_gets_the_compile_budget(tmp_path):
    """A slow first call (a JIT build) is not a TIMEOUT when the compile budget covers it; later calls get no extra."""
    src = REF + "import time\nSLOW = [True]\ndef run(q, k, w, lens, table, out):\n" \
        "    if SLOW:\n        SLOW.clear()\n        time.sleep(12)\n" \
        "    out.copy_(_r('" + INDEXER + "')(q, k, w, lens, table)[0])\n"
    package = solutions.load_package(write_package(tmp_path, INDEXER, src))
    results = _gate(package.solution, INDEXER, [small_indexer("first"), small_indexer("second", batch_size=2)],
                    timeout_s=8, trials=1, scan=False, first_call_extra_s=30)
    assert [r.status for r in results] == ["PASSED", "PASSED"], [r.reason for r in results]
    (late,) = _gate(package.solution, INDEXER, [small_indexer("alone")], timeout_s=8, trials=1, scan=False)
    assert late.status == "TIMEOUT"


def test_an_infinity_matches_only_the_same_infinity_in_the_reference():
    """A fully padded attention row has lse = -inf in the reference: the same -inf passes, a finite value there
    fails (its relative error would be NaN, which no tolerance test counts as bad), and an inf elsewhere fails."""
    from sdk.gate.compare import Tolerance, check_default

    ref = torch.tensor([[1.0, 2.0], [-math.inf, -math.inf]])
    names, tol = ["lse"], Tolerance()
    assert check_default(names, [ref.clone()], [ref], tol).status == "PASSED"
    finite = ref.clone()
    finite[1] = 0.0
    got = check_default(names, [finite], [ref], tol)
    assert (got.status, got.reason) == ("INCORRECT_NUMERICAL", "lse: finite where the reference is infinite")
    wrong_sign = ref.clone()
    wrong_sign[1, 0] = math.inf
    assert check_default(names, [wrong_sign], [ref], tol).reason == "lse: contains inf"
    stray = ref.clone()
    stray[0, 0] = -math.inf
    assert check_default(names, [stray], [ref], tol).reason == "lse: contains inf"

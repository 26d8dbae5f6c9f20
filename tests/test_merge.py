"""Merging partial runs: later timed rows win, gate-only rows never replace timed ones, borrowed references are
marked cross-run, and gate-only rows stay out of the timing summary."""
import json

from sdk import jsonl
from sdk._fib import Environment, Evaluation, Performance, Correctness, Trace
from sdk.bench import merge
from sdk.bench.runner import SCHEMA
from tests.helpers import INDEXER, small_indexer


def _row(solution, uuid, latency, ref=None, status="PASSED"):
    return {"definition": INDEXER, "solution": solution, "solution_hash": "h-" + solution, "workload": uuid,
            "axes": {}, "status": status, "reason": "", "latency_ms": latency, "reference_latency_ms": ref,
            "floor_ms": 0.001 if ref else None, "work": None, "peers": {}}


def _trace(solution, uuid, latency):
    ev = Evaluation(status="PASSED", environment=Environment(hardware="H200"), timestamp="t", log="",
                    correctness=Correctness(), performance=Performance(latency_ms=latency))
    return Trace(definition=INDEXER, workload=small_indexer(uuid), solution=solution, evaluation=ev)


def test_merge_borrows_references_and_keeps_gate_only_rows_out_of_timing(tmp_path):
    run1 = tmp_path / "run1.json"
    run1.write_text(json.dumps({"schema": SCHEMA, "environment": {"gpu": "H200", "commit": "a"},
                                "rows": [_row("base", "w1", 1.0, ref=2.0), _row("base", "w2", None, status="TIMEOUT")],
                                "summary": {}}))
    kernel = tmp_path / "kernel.jsonl"
    jsonl.append(kernel, _trace("kern", "w1", 0.01).model_dump_json())
    gate = tmp_path / "gate_base.jsonl"
    jsonl.append(gate, _trace("base", "w2", 0.5).model_dump_json())
    jsonl.append(gate, _trace("base", "w1", 0.5).model_dump_json())  # must not replace the timed run-1 row
    merged = merge.merge([{"label": "r1", "results": [run1]},
                          {"label": "r2", "traces": [(kernel, False), (gate, True)],
                           "hashes": {"kern": "h-kern", "base": "h-base"}}])
    rows = {(r["solution"], r["workload"]): r for r in merged["rows"]}
    assert rows["base", "w1"]["latency_ms"] == 1.0 and rows["base", "w1"]["run"] == "r1"
    assert rows["base", "w2"]["status"] == "PASSED" and rows["base", "w2"]["gate_only"] is True
    assert rows["base", "w2"]["latency_ms"] is None
    kern = rows["kern", "w1"]
    assert kern["reference_latency_ms"] == 2.0 and kern["reference_run"] == "r1" and not kern["same_run_reference"]
    assert kern["solution_hash"] == "h-kern"
    summary = merged["summary"][INDEXER]
    assert summary["gate"]["base"] == {"passed": 2, "total": 2}
    assert summary["solutions"]["base"]["passed"] == 1 and summary["solutions"]["base"]["total"] == 1
    assert summary["solutions"]["kern"]["mean_speedup_vs_reference"] == 200.0

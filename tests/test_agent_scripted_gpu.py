"""The H200 scripted run (README, "Agent loop") against a pretend GPU: the real script, the real loop and
tools, and a fake `sdk.gate` whose timings depend on the patched CUDA source, so the GPU-only paths run on CPU:
bench through the tool, the final pipeline reusing what the tool measured, profiler and evaluator, speedup vs
reference and vs parent, promotion of an edited candidate with its patch as evidence."""
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))
from agent_fakes import INDEXER_SCRIPT, FakeGpuHooks, judge_records  # noqa: E402

from sdk.agent import jsonl  # noqa: E402
from sdk.agent.hooks import Hooks  # noqa: E402
from sdk.agent.loop import RunConfig, run  # noqa: E402

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
KEYS = ["30cecff1", "7f03b670", "5db1b172"]


class IndexerFakeGpu(FakeGpuHooks):
    def workloads(self, definition, keys, count=4):
        return Hooks.workloads(self, definition, keys, count)


def install_fake_gate(monkeypatch) -> list:
    from sdk.gate.plan import CallPlan  # the real plan type, before the fake module replaces sdk.gate

    calls = []

    def gate_solution(solution, definition, workloads, *, trials, seed, tol, plan, timeout_s, device=None):
        launch = next(s.content for s in solution.sources if s.path == "indexer_launch.cu")
        patched = "kEmitThreads = 512" in launch
        calls.append({"timed": plan is not None, "patched": patched})
        out = []
        for w in workloads:
            short = w.axes["max_num_pages"] * 64 <= 2048
            latency = (0.008 if patched else 0.010) if short else 0.030  # the patch only touches short rows
            raw = judge_records(latency, 2.0, calls=1) if plan is not None else {}
            out.append(SimpleNamespace(workload=w, status="PASSED", reason="", raw=raw))
        return out

    module = types.ModuleType("sdk.gate")
    module.CallPlan = CallPlan
    module.gate_solution = gate_solution
    module.contest_tolerance = lambda definition: None
    monkeypatch.setitem(sys.modules, "sdk.gate", module)
    return calls


def test_the_h200_scripted_run_gates_times_and_promotes_the_patch(tmp_path, monkeypatch):
    calls = install_fake_gate(monkeypatch)
    summary = run(RunConfig(run_dir=tmp_path / "run", definitions=[INDEXER], backend="scripted", script=INDEXER_SCRIPT,
                            max_iters=2, trials=2, workloads=KEYS, compile_check="never"), hooks=IndexerFakeGpu())
    c1, c2 = jsonl.read(tmp_path / "run" / "candidates.jsonl")
    # c0001: the final pipeline's one timed gate; c0002: the tool's gate, the tool's bench, and nothing more
    assert [(c["timed"], c["patched"]) for c in calls] == [(True, False), (False, True), (True, True)]
    assert c1["decision"] == "accept" and c1["speedup_basis"] == "reference"
    assert c1["speedup_vs_reference"] == round((2 / 0.010 * 2 + 2 / 0.030) / 3, 6)
    assert c2["parent"] == "c0001" and c2["overlay_files"] == ["indexer_launch.cu"]
    assert c2["speedup_vs_parent"] == round((0.010 / 0.008 * 2 + 1.0) / 3, 6)
    assert c2["decision"] == "accept" and c2["reason"].startswith("new best:")
    session = json.loads((tmp_path / "run" / "candidates" / "c0002" / "session.json").read_text())
    bench = next(t for t in session["transcript"] if t["tool"] == "bench")
    assert bench["ok"] and bench["result"].startswith("bench (cupti-span (torch.profiler/kineto), cold L2, no CUDA graph): mean 0.015333 ms; speedup vs reference 188.888889, vs parent 1.166667")
    best = summary["definitions"][0]
    assert best["best"]["id"] == "c0002" and best["frontier"] == ["c0002", "c0001"]
    promoted = Path(best["promoted"])
    assert not (promoted / "render.toml").exists()  # an edited candidate is not a pure template point
    evidence = json.loads((promoted / "evidence.json").read_text())
    assert evidence["patches"] == ["001.diff"] and [n["id"] for n in evidence["lineage"]] == ["c0002", "c0001"]
    assert "kEmitThreads = 512" in (promoted / "solution" / "python" / "indexer_launch.cu").read_text()
    roles = [r["role"] for r in jsonl.read(tmp_path / "run" / "ledger.jsonl") if r.get("kind") == "call"]
    assert roles.count("profiler") == 2 and roles.count("evaluator") == 2 and roles.count("coder") == 9

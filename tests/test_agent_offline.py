"""Offline backend: CPU render + compile check that says what it could not time, determinism, replay, the gated
autotuner path (fake GPU modules behind the real adapter), promotion, human inputs and budgets."""
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))
from agent_fakes import DEF, TOY_ROOT, CpuHooks, FakeGpuHooks, install_fake_gpu_modules, latency  # noqa: E402

from sdk import render  # noqa: E402
from sdk.agent import jsonl  # noqa: E402
from sdk.agent.loop import RunConfig, rule_decision, run  # noqa: E402
from sdk.regenerate import check_drift  # noqa: E402


def config(tmp_path, name="run", **kw) -> RunConfig:
    kw.setdefault("compile_check", "never")
    return RunConfig(run_dir=tmp_path / name, definitions=[DEF], template="toy_scale", templates_root=TOY_ROOT,
                     **kw)


def lineage(run_dir: Path) -> list[dict]:
    return jsonl.read(run_dir / "candidates.jsonl")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: the sm_90a compile check cannot run")
def test_cpu_run_renders_compiles_and_reports_untimed(tmp_path):
    summary = run(config(tmp_path, max_iters=2, compile_check="auto"), hooks=CpuHooks())
    records = lineage(tmp_path / "run")
    assert [r["id"] for r in records] == ["c0001", "c0002"]
    for record in records:
        assert record["statuses"]["compile"] == "ok"
        assert record["statuses"]["gate"] == "not gated: no GPU"
        assert record["statuses"]["bench"] == "not timed: no GPU"
        assert record["latency_ms"] is None and record["speedup"] is None  # never invented
        assert record["decision"] == "blocked" and "compiled for sm_90a" in record["reason"]
        assert record["ptxas"] and record["ptxas"][0]["arch"] == "sm_90a"
        folder = tmp_path / "run" / "candidates" / record["id"]
        assert "not profiled: nothing was timed" in (folder / "profile.md").read_text()
        assert "sm_90a" in (folder / "build.log").read_text()
    assert records[0]["params"] == render.default_params("toy_scale", TOY_ROOT)
    assert summary["definitions"][0]["promoted"] is None


def test_same_seed_same_candidates_and_replay_reproduces_them(tmp_path):
    first = run(config(tmp_path, "a", max_iters=6, seed=7), hooks=CpuHooks())
    run(config(tmp_path, "b", max_iters=6, seed=7), hooks=CpuHooks())
    a, b = lineage(tmp_path / "a"), lineage(tmp_path / "b")
    keys = ("id", "parent", "params", "sources_sha256", "decision")
    assert [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]
    assert len({json.dumps(r["params"], sort_keys=True) for r in a}) == 6  # no point visited twice
    assert first["ledger"]["total"]["calls"] >= 12

    replay = RunConfig(run_dir=tmp_path / "replay", backend="replay", replay_from=tmp_path / "a", definitions=[DEF],
                       template="toy_scale", templates_root=TOY_ROOT, max_iters=6, compile_check="never")
    run(replay, hooks=CpuHooks())
    again = lineage(tmp_path / "replay")
    assert [r["sources_sha256"] for r in again] == [r["sources_sha256"] for r in a]
    for record in again:  # byte for byte: the rendered files themselves
        src = tmp_path / "replay" / "candidates" / record["id"] / "package" / "solution" / "python"
        ref = tmp_path / "a" / "candidates" / record["id"] / "package" / "solution" / "python"
        assert {p.name: p.read_bytes() for p in src.iterdir()} == {p.name: p.read_bytes() for p in ref.iterdir()}
    calls = [r for r in jsonl.read(tmp_path / "replay" / "ledger.jsonl") if r["kind"] == "call"]
    assert {c["gen_ai.provider.name"] for c in calls} == {"replay"}
    assert all(c["fib_sdk.replay_prompt_match"] for c in calls)


def reference_speedup(params: dict) -> float:
    """What the fake gate's timings give: its reference takes 10 ms (small) and 40 ms (large)."""
    return (10.0 / latency(params, "wl-small-0001") + 40.0 / latency(params, "wl-large-0002")) / 2


def test_gated_search_improves_and_promotes_the_best(tmp_path, monkeypatch):
    counters = install_fake_gpu_modules(monkeypatch)
    summary = run(config(tmp_path, max_iters=8, seed=3), hooks=FakeGpuHooks())
    records = lineage(tmp_path / "run")
    assert counters["gate"] == len(records)  # one gate call per candidate, timing inside it
    assert all(t is not None and t.iters > 1 for t in counters["timing"])  # a timing plan for every gated candidate
    baseline = records[0]
    assert baseline["decision"] == "accept" and baseline["speedup_basis"] == "reference"
    assert baseline["speedup"] == pytest.approx(reference_speedup(baseline["params"]), abs=1e-5)
    accepted = {}
    for record in records:
        if record["params"]["UNROLL"] == 4:  # the fake gate fails these: never timed, never accepted
            assert record["decision"] == "reject" and record["statuses"]["gate"].startswith("FAILED")
            assert record["latency_ms"] is None
            continue
        expected = sum(latency(record["params"], w) for w in ("wl-small-0001", "wl-large-0002")) / 2
        assert record["latency_ms"] == pytest.approx(expected)
        assert record["speedup_vs_reference"] == pytest.approx(reference_speedup(record["params"]), abs=1e-5)
        parent = accepted.get(record["parent"])
        if parent is not None:  # built on a frontier member: its step is measured against it
            assert record["speedup_vs_parent"] == pytest.approx(
                sum(latency(parent["params"], w) / latency(record["params"], w)
                    for w in ("wl-small-0001", "wl-large-0002")) / 2, abs=1e-5)
        if record["decision"] == "accept" and accepted:
            best = max(accepted.values(), key=lambda r: r["speedup"])
            assert record["speedup"] > best["speedup"] * 1.02 or record["speedup"] > parent["speedup"] * 1.02
        if record["decision"] == "accept":
            accepted[record["id"]] = record
    result = summary["definitions"][0]
    best = max(accepted.values(), key=lambda r: r["speedup"])
    assert result["best"]["id"] == best["id"] and best["speedup"] > baseline["speedup"], "no win in 8 steps"
    assert result["frontier"][0] == best["id"] and len(result["frontier"]) <= 3
    promoted = Path(result["promoted"])
    assert promoted == tmp_path / "run" / "promoted" / "toy_scale"
    assert (promoted / "render.toml").exists() and check_drift(promoted.parent, TOY_ROOT) == []
    evidence = json.loads((promoted / "evidence.json").read_text())
    assert evidence["candidate"]["id"] == best["id"] and evidence["lineage"][0]["id"] == best["id"]
    assert evidence["lineage"][-1]["id"] == "c0001" and len(evidence["bench"]) == 2
    roles = {r["role"] for r in jsonl.read(tmp_path / "run" / "ledger.jsonl") if r.get("kind") == "call"}
    assert {"planner", "coder", "profiler", "evaluator"} <= roles


def test_several_candidates_in_flight_on_a_frontier_are_deterministic(tmp_path, monkeypatch):
    install_fake_gpu_modules(monkeypatch)
    first = run(config(tmp_path, "a", max_iters=9, seed=5, parallel=3), hooks=FakeGpuHooks())
    run(config(tmp_path, "b", max_iters=9, seed=5, parallel=3), hooks=FakeGpuHooks())
    a, b = lineage(tmp_path / "a"), lineage(tmp_path / "b")
    keys = ("id", "parent", "params", "sources_sha256", "decision", "speedup")
    assert [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]
    assert len(a) == 9 and [r["iteration"] for r in a] == list(range(1, 10))
    for start in (0, 3, 6):  # one round: three distinct points planned together
        assert len({json.dumps(r["params"], sort_keys=True) for r in a[start:start + 3]}) == 3
    parents = {r["parent"] for r in a[3:]}
    assert len(parents) >= 2, "every candidate of later rounds was built on the same parent (no frontier)"
    assert all(p in {r["id"] for r in a if r["decision"] == "accept"} for p in parents if p)
    planner_calls = [r for r in jsonl.read(tmp_path / "a" / "ledger.jsonl") if r.get("role") == "planner"]
    assert len(planner_calls) == 9 and first["definitions"][0]["candidates"] == 9


def test_missing_gate_module_blocks_instead_of_timing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sdk.gate", None)  # import fails like an absent module
    run(config(tmp_path, max_iters=2), hooks=FakeGpuHooks())
    for record in lineage(tmp_path / "run"):
        assert record["statuses"]["gate"].startswith("not gated: sdk.gate is not available")
        assert record["decision"] == "blocked" and record["latency_ms"] is None


def test_gate_crash_rejects_and_a_gate_without_timings_times_nothing(tmp_path, monkeypatch):
    install_fake_gpu_modules(monkeypatch)

    def crash(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(sys.modules["sdk.gate"], "gate_solution", crash)
    run(config(tmp_path, "crash", max_iters=1), hooks=FakeGpuHooks())
    [record] = lineage(tmp_path / "crash")
    assert record["decision"] == "reject" and "illegal memory access" in record["statuses"]["gate"]
    install_fake_gpu_modules(monkeypatch, timed=False)
    run(config(tmp_path, "untimed", max_iters=1), hooks=FakeGpuHooks())
    [record] = lineage(tmp_path / "untimed")
    assert record["statuses"]["gate"] == "PASSED" and record["statuses"]["bench"].startswith("not timed: Runtime")
    assert record["decision"] == "blocked" and record["latency_ms"] is None


def test_redirect_note_pins_the_search_and_is_recorded(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "redirect.md").write_text('Only BLOCK=64 from now on.\n```json\n{"pin": {"BLOCK": 64}}\n```\n')
    reference = tmp_path / "notes.md"
    reference.write_text("Reference: radix select keeps a 256-bin histogram in shared memory.\n")
    run(config(tmp_path, max_iters=3, references=[reference]), hooks=CpuHooks())
    assert all(r["params"]["BLOCK"] == 64 for r in lineage(run_dir))
    inputs = [r for r in jsonl.read(run_dir / "ledger.jsonl") if r["kind"] == "human_input"]
    assert [i["input_kind"] for i in inputs] == ["policy", "reference", "redirect"]
    planner_prompts = [json.loads(p.read_text()) for p in sorted((run_dir / "calls").glob("*.json"))]
    assert "Only BLOCK=64" in planner_prompts[0]["prompt"] and "radix select" in planner_prompts[0]["prompt"]


def test_redirect_stop_and_wall_budget_end_the_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "redirect.md").write_text('```json\n{"stop": "humans pause the search"}\n```\n')
    summary = run(config(tmp_path, max_iters=3), hooks=CpuHooks())
    assert summary["definitions"][0]["stop_reason"] == "stopped by the redirect note: humans pause the search"
    summary = run(config(tmp_path, "wall", max_iters=3, budget_wall_s=0), hooks=CpuHooks())
    assert summary["definitions"][0]["stop_reason"].startswith("wall-time budget exhausted")
    assert summary["definitions"][0]["candidates"] == 0


def test_exhausted_space_stops_the_planner(tmp_path):
    root = tmp_path / "templates"
    shutil.copytree(TOY_ROOT / "toy_scale", root / "tiny")
    spec = (root / "tiny" / "template.toml").read_text()
    (root / "tiny" / "template.toml").write_text(
        spec.replace("BLOCK = [64, 128, 256]", "BLOCK = [128]").replace("UNROLL = [1, 2, 4]", "UNROLL = [1]"))
    summary = run(RunConfig(run_dir=tmp_path / "run", definitions=[DEF], template="tiny", templates_root=root,
                            max_iters=5, compile_check="never"), hooks=CpuHooks())
    assert summary["definitions"][0]["candidates"] == 2
    assert summary["definitions"][0]["stop_reason"] == "planner stopped: parameter space exhausted"


def test_decision_rules_only_accept_gated_timed_wins():
    best = {"id": "c0001", "speedup": 1.0}
    passed = {"statuses": {"render": "ok", "scan": "passed", "compile": "ok", "gate": "PASSED",
                           "bench": "timed 2 workload(s)"}, "speedup": 1.10}
    assert rule_decision(passed, best, 0.02)["decision"] == "accept"
    assert rule_decision({**passed, "speedup": 1.01}, best, 0.02)["decision"] == "rework"
    assert rule_decision({**passed, "speedup": 0.5}, best, 0.02)["decision"] == "reject"
    assert "held for review" in rule_decision({**passed, "speedup": 25.0}, best, 0.02)["reason"]
    cache = {**passed, "declared_cache": True, "cold_warm_reported": False}
    assert rule_decision(cache, best, 0.02)["decision"] == "rework"
    assert rule_decision({**cache, "cold_warm_reported": True}, best, 0.02)["decision"] == "accept"
    failed = {**passed, "statuses": {**passed["statuses"], "gate": "FAILED (1/2 not PASSED: INCORRECT_NUMERICAL)"}}
    assert rule_decision(failed, best, 0.02)["decision"] == "reject"
    untimed = {**passed, "speedup": None, "statuses": {**passed["statuses"], "gate": "not gated: no GPU"}}
    assert rule_decision(untimed, None, 0.02)["decision"] == "blocked"

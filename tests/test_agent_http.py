"""Real litellm against a scripted OpenAI-compatible server on 127.0.0.1 (sdk.agent.script_server): a model that
works only through tool calls patches the indexer's CUDA, compiles it for sm_90a, gates it on the CPU fallback
and lands in ledger and lineage; the recorded run replays; retries are counted once (the HTTP requests the server
saw), the timeout is a deadline per call, --api-base reaches the server and a run whose calls all failed exits 3.

Needs the `agent` extra (litellm); skipped with that reason where it is not installed."""
import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from tests.helpers import cli_runner

litellm = pytest.importorskip("litellm", reason="litellm is not installed (the `agent` extra): the real-HTTP "
                                                "litellm tests need it")

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))
from agent_fakes import DEF, INDEXER_SCRIPT, TOY_ROOT, CpuHooks, SmallIndexerCpuHooks, fenced  # noqa: E402

from sdk.agent import jsonl  # noqa: E402
from sdk.agent.commands import regenerate  # noqa: E402
from sdk.agent.loop import RunConfig, run  # noqa: E402
from sdk.agent.script import Script  # noqa: E402
from sdk.agent.script_server import ScriptServer  # noqa: E402
from sdk.regenerate import read_render_record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
pytestmark = pytest.mark.filterwarnings("ignore:Item .* is using the .ReadOnly. qualifier:UserWarning")  # litellm
POINT = {"BLOCK": 256, "UNROLL": 2, "VECTOR": True}


def scripted(replies: dict, model: str = "scripted/model") -> Script:
    return Script({"model": model, "replies": replies})


def calls_of(run_dir: Path) -> list[dict]:
    return [r for r in jsonl.read(run_dir / "ledger.jsonl") if r["kind"] == "call"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: the sm_90a compile of the patch "
                                                         "cannot run")
def test_a_scripted_model_patches_cuda_through_litellm_tool_calls(tmp_path):
    script = Script.load(INDEXER_SCRIPT)
    expected_usage = [r["usage"] for r in json.loads(INDEXER_SCRIPT.read_text())["replies"]["planner"]] + \
        [r["usage"] for r in json.loads(INDEXER_SCRIPT.read_text())["replies"]["coder"]]
    with ScriptServer(script) as server:
        config = RunConfig(run_dir=tmp_path / "run", definitions=[INDEXER], backend="litellm",
                           model="openai/scripted-indexer", api_base=server.url, cpu_gate=True, max_iters=2,
                           trials=2, timeout_s=120, max_retries=0)
        summary = run(config, hooks=SmallIndexerCpuHooks())
        requests = list(server.requests)
    run_dir = tmp_path / "run"
    # every request went through litellm's OpenAI client to this server, the coder's with the SDK's tools
    assert [r["role"] for r in requests] == ["planner", "coder", "coder", "coder", "planner"] + ["coder"] * 6
    assert all({t["function"]["name"] for t in r["body"]["tools"]} >= {"apply_patch", "compile", "gate", "bench"}
               for r in requests if r["role"] == "coder")
    coder_turn_2 = [r for r in requests if r["role"] == "coder"][5]["body"]["messages"]  # after apply_patch
    assert coder_turn_2[-1]["role"] == "tool" and "patch applied" in coder_turn_2[-1]["content"]
    # the task reached the model: definition, reference, workloads and the sources, nothing cut
    first = requests[1]["body"]["messages"][1]["content"]
    assert "PyTorch reference" in first and "def run(" in first and "max_num_pages" in first
    assert "candidate: `indexer_launch.cu`" in first and "[... truncated]" not in first
    # lineage: c0002 is c0001 plus the CUDA patch, compiled for sm_90a and gated on the CPU fallback
    c1, c2 = jsonl.read(run_dir / "candidates.jsonl")
    assert c1["params"] == c2["params"] == read_render_record(ROOT / "solutions" / "dsa_topk_indexer")[1]
    assert c2["parent"] == "c0001" and c2["overlay_files"] == ["indexer_launch.cu"] and c2["patches"] == 1
    for record in (c1, c2):
        assert record["statuses"]["compile"] == "ok" and record["statuses"]["gate"] == "PASSED"
        assert record["statuses"]["device"].startswith("cpu") and record["decision"] == "blocked"
        assert record["latency_ms"] is None and record["speedup"] is None  # nothing timed without a GPU
    folder = run_dir / "candidates" / "c0002"
    assert "kEmitThreads = 512" in (folder / "package" / "solution" / "python" / "indexer_launch.cu").read_text()
    assert "emit_short_rows_kernelILi512" in (folder / "build.log").read_text()  # the patched kernel was built
    assert [r["status"] for r in json.loads((folder / "gate.json").read_text())["rows"]] == ["PASSED", "PASSED"]
    assert (folder / "patches" / "001.diff").exists()
    # ledger: one line per HTTP request (no hidden client retries), usage exactly as the server reported it
    calls = calls_of(run_dir)
    assert len(calls) == len(requests) == summary["model_calls"]["ok"]
    assert [c["gen_ai.usage.input_tokens"] for c in calls] == [u["prompt_tokens"] for u in expected_usage[:1]] + \
        [u["prompt_tokens"] for u in expected_usage[2:5]] + [expected_usage[1]["prompt_tokens"]] + \
        [u["prompt_tokens"] for u in expected_usage[5:]]
    assert all(c["gen_ai.provider.name"] == "openai" and c["gen_ai.response.model"] for c in calls)
    tools = [(r["candidate_id"], r["gen_ai.tool.name"], r["fib_sdk.tool.ok"])
             for r in jsonl.read(run_dir / "ledger.jsonl") if r["kind"] == "tool"]
    assert tools == [("c0001", "render_template", True), ("c0001", "compile", True), ("c0001", "finish", True),
                     ("c0002", "read_file", True), ("c0002", "apply_patch", True), ("c0002", "compile", True),
                     ("c0002", "gate", True), ("c0002", "bench", False), ("c0002", "finish", True)]

    # the recorded run replays: the same candidates, byte for byte, from calls/ alone
    replay = RunConfig(run_dir=tmp_path / "replay", backend="replay", replay_from=run_dir, definitions=[INDEXER],
                       max_iters=2, compile_check="never")
    run(replay, hooks=SmallIndexerCpuHooks())
    again = jsonl.read(tmp_path / "replay" / "candidates.jsonl")
    assert [(r["id"], r["parent"], r["sources_sha256"]) for r in again] == [
        (r["id"], r["parent"], r["sources_sha256"]) for r in (c1, c2)]
    matches = [c["fib_sdk.replay_prompt_match"] for c in calls_of(tmp_path / "replay") if c["role"] == "planner"]
    assert matches == [True, False]  # the second planner saw other statuses (no compile, no gate) and says so


def test_retries_are_counted_once_and_the_cli_fails_when_no_call_succeeds(tmp_path):
    busy = {"error": {"status": 429, "message": "slow down", "type": "rate_limit"}}
    with ScriptServer(scripted({"planner": [busy] * 5})) as server:
        result = cli_runner().invoke(regenerate, [
            DEF, "--template", "toy_scale", "--templates-root", str(TOY_ROOT), "--backend", "litellm",
            "--model", "openai/scripted", "--api-base", server.url, "--max-retries", "2", "--retry-backoff-s",
            "0.05", "--compile-check", "never", "--run-dir", str(tmp_path / "run")])
        requests = list(server.requests)
    assert len(requests) == 3  # 1 + 2 retries: litellm's client did not retry on its own
    assert result.exit_code == 3, result.output
    assert "no model call succeeded (1 attempted)" in result.output
    [call] = calls_of(tmp_path / "run")
    assert call["error.type"] == "RateLimitError" and call["fib_sdk.retries"] == 2


def test_the_timeout_is_a_deadline_per_call(tmp_path):
    slow = {"delay_s": 3.0, "content": fenced({"stop": "late"})}
    with ScriptServer(scripted({"planner": [slow, slow]})) as server:
        started = time.monotonic()
        summary = run(RunConfig(run_dir=tmp_path / "run", definitions=[DEF], template="toy_scale",
                                templates_root=TOY_ROOT, backend="litellm", model="openai/scripted",
                                api_base=server.url, timeout_s=1.0, max_retries=3, retry_backoff_s=0.05,
                                compile_check="never", max_iters=1), hooks=CpuHooks())
        elapsed = time.monotonic() - started
        requests = len(server.requests)
    [call] = calls_of(tmp_path / "run")
    assert call["error.type"] == "Timeout" and requests == 1  # no retry fits in what is left of the deadline
    assert elapsed < 2.9 and summary["model_calls"] == {"total": 1, "ok": 0}


def test_a_known_model_behind_api_base_is_priced_from_the_reported_usage(tmp_path):
    replies = {"planner": [{"content": fenced({"parent": None, "direction": "d", "template": "toy_scale",
                                               "params": POINT}),
                            "usage": {"prompt_tokens": 1234, "completion_tokens": 567}}],
               "coder": [{"tool_calls": [{"name": "render_template", "arguments": {"params": POINT}},
                                         {"name": "finish", "arguments": {"summary": "point"}}],
                          "usage": {"prompt_tokens": 2000, "completion_tokens": 100}}]}
    with ScriptServer(scripted(replies, model="gpt-4o-mini")) as server:
        summary = run(RunConfig(run_dir=tmp_path / "run", definitions=[DEF], template="toy_scale",
                                templates_root=TOY_ROOT, backend="litellm", model="openai/gpt-4o-mini",
                                api_base=server.url, compile_check="never", max_iters=1), hooks=CpuHooks())
    total = summary["ledger"]["total"]
    assert (total["gen_ai.usage.input_tokens"], total["gen_ai.usage.output_tokens"]) == (3234, 667)
    price = litellm.model_cost["gpt-4o-mini"]
    expected = 3234 * price["input_cost_per_token"] + 667 * price["output_cost_per_token"]
    assert total["cost_unknown_calls"] == 0 and total["cost_usd"] == pytest.approx(expected, rel=1e-9)
    [record] = jsonl.read(tmp_path / "run" / "candidates.jsonl")
    assert record["params"] == POINT and record["session"]["tool_calls"] == 2

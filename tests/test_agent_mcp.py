"""`fib-sdk mcp` over stdio with the official MCP client: an external agent reads the task, starts a candidate,
renders a template point, gates it (CPU fallback) and finishes it; the run folder holds its lineage and the
ledger of its tool calls, and the agent's own token usage is imported from an OTel export onto that candidate.

Needs the `agent` extra (mcp); skipped with that reason where it is not installed."""
import json
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (the `agent` extra): `fib-sdk mcp` cannot be tested")
import anyio  # noqa: E402  (an mcp dependency)
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))
from agent_fakes import SMALL_INDEXER_WORKLOADS  # noqa: E402

from sdk.agent import jsonl  # noqa: E402
from sdk.agent.ledger import summarize  # noqa: E402
from sdk.agent.otel_import import import_usage  # noqa: E402
from sdk.regenerate import read_render_record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
POINT = read_render_record(ROOT / "solutions" / "dsa_topk_indexer")[1]  # the committed point


def text_of(result) -> str:
    assert not (getattr(result, "is_error", None) or getattr(result, "isError", None)), result  # mcp 2 | 1
    return "".join(part.text for part in result.content if getattr(part, "text", None))


async def drive(run_dir: Path) -> dict:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR", "FIB_SDK_CACHE") if k in os.environ}
    env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")  # a CPU machine, whatever runs the test
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env, args=[
        "-m", "sdk", "mcp", "--run-dir", str(run_dir), "--agent", "test-agent", "--cpu-gate", "--trials", "1",
        "--compile-check", "never", "--workloads-file", str(SMALL_INDEXER_WORKLOADS)])
    out = {}
    with anyio.fail_after(240):
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                out["tools"] = {t.name for t in (await session.list_tools()).tools}
                out["task"] = text_of(await session.call_tool("task", {"definition": INDEXER}))
                started = json.loads(text_of(await session.call_tool("start_candidate", {"definition": INDEXER})))
                cid = out["candidate"] = started["candidate"]
                out["t_work"] = time.time()
                out["render"] = text_of(await session.call_tool("render_template", {"candidate": cid,
                                                                                    "params": POINT}))
                out["gate"] = text_of(await session.call_tool("gate", {"candidate": cid, "workloads": [
                    "small-indexer-a"]}))
                out["bench"] = text_of(await session.call_tool("bench", {"candidate": cid}))
                out["finish"] = json.loads(text_of(await session.call_tool("finish_candidate", {
                    "candidate": cid, "summary": "the committed point"})))
                out["after"] = text_of(await session.call_tool("gate", {"candidate": cid}))
                out["lineage"] = json.loads(text_of(await session.call_tool("candidates", {})))
    return out


def test_an_external_agent_renders_and_gates_through_fib_sdk_mcp(tmp_path):
    run_dir = tmp_path / "mcp-run"
    out = anyio.run(drive, run_dir)
    assert {"task", "start_candidate", "read_file", "apply_patch", "render_template", "compile", "gate", "bench",
            "profile", "finish_candidate", "candidates"} <= out["tools"]
    assert "PyTorch reference" in out["task"] and "start_candidate" in out["task"]
    assert out["candidate"] == "c0001"
    assert out["render"].startswith("rendered templates/dsa_topk_indexer at " + json.dumps(POINT, sort_keys=True))
    assert out["gate"].startswith("gate PASSED [cpu (torch fallback") and "small-in: PASSED" in out["gate"]
    assert out["bench"].startswith("not timed: no GPU")
    finish = out["finish"]
    assert finish["decision"] == "blocked" and finish["statuses"]["gate"] == "PASSED"
    assert finish["statuses"]["device"].startswith("cpu") and finish["speedup"] is None
    assert out["after"].startswith("error: candidate c0001 is finished")  # a finished candidate is frozen
    [record] = jsonl.read(run_dir / "candidates.jsonl")
    assert record["id"] == "c0001" and record["agent"] == "mcp:test-agent" and record["params"] == POINT
    assert out["lineage"][0]["id"] == "c0001" and out["lineage"][0]["decision"] == "blocked"
    gate = json.loads((run_dir / "candidates" / "c0001" / "gate.json").read_text())
    assert [r["workload"] for r in gate["rows"]] == ["small-indexer-a", "small-indexer-b"]  # the run's workloads
    tools = [(r["gen_ai.tool.name"], r["fib_sdk.tool.source"]) for r in jsonl.read(run_dir / "ledger.jsonl")
             if r["kind"] == "tool"]
    assert tools == [("start_candidate", "mcp:test-agent"), ("render_template", "mcp:test-agent"),
                     ("gate", "mcp:test-agent"), ("bench", "mcp:test-agent"),
                     ("finish_candidate", "mcp:test-agent")]

    # the agent's own model usage, from its OTel export (OTLP/JSON spans), lands on the candidate it worked on
    nanos = str(int(out["t_work"] * 1e9))
    export = tmp_path / "agent-otel.json"
    span = {"traceId": "ab", "spanId": "01", "name": "chat", "startTimeUnixNano": nanos, "endTimeUnixNano": nanos,
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                           {"key": "gen_ai.request.model", "value": {"stringValue": "claude-x"}},
                           {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "5000"}},
                           {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "700"}},
                           {"key": "gen_ai.usage.cache_read.input_tokens", "value": {"intValue": "4000"}}]}
    export.write_text(json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "claude-code"}}]}, "scopeSpans": [{"spans": [span]}]}]}))
    assert import_usage(run_dir, export) == (1, 0)
    assert import_usage(run_dir, export) == (0, 1)  # idempotent
    [call] = [r for r in jsonl.read(run_dir / "ledger.jsonl") if r["kind"] == "call"]
    assert call["candidate_id"] == "c0001" and call["definition"] == INDEXER
    assert call["fib_sdk.agent"] == "claude-code" and call["gen_ai.request.model"] == "claude-x"
    total = summarize(jsonl.read(run_dir / "ledger.jsonl"))["total"]
    assert (total["gen_ai.usage.input_tokens"], total["gen_ai.usage.output_tokens"]) == (5000, 700)
    assert total["gen_ai.usage.cache_read.input_tokens"] == 4000 and total["cost_unknown_calls"] == 1

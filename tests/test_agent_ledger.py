"""Ledger and JSONL durability: exact summaries, torn lines from a killed writer, the `ledger` command."""
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
from tests.helpers import cli_runner

from sdk.agent import jsonl
from sdk.agent.commands import ledger as ledger_command
from sdk.agent.ledger import Ledger, Usage, summarize


def test_append_and_read_back(tmp_path):
    path = tmp_path / "l.jsonl"
    for index in range(3):
        jsonl.append(path, {"i": index, "text": "line\nbreak"})
    assert [r["i"] for r in jsonl.read(path)] == [0, 1, 2]
    assert path.read_bytes().count(b"\n") == 3  # newlines inside values are escaped


def test_partial_last_line_is_ignored_with_a_warning_and_fenced_off(tmp_path, capsys):
    path = tmp_path / "l.jsonl"
    jsonl.append(path, {"i": 1})
    with open(path, "ab") as handle:
        handle.write(b'{"i": 2, "trunc')  # what a kill in the middle of a write leaves
    assert jsonl.read(path) == [{"i": 1}]
    assert "ignoring a torn final line" in capsys.readouterr().err
    jsonl.append(path, {"i": 3})  # the writer terminates the fragment first
    with pytest.warns(UserWarning, match="unparsable record"):
        assert jsonl.read(path) == [{"i": 1}, {"i": 3}]


def test_killed_writer_leaves_only_whole_lines(tmp_path):
    path = tmp_path / "l.jsonl"
    code = ("import sys; from sdk.agent import jsonl\n"
            "i = 0\nwhile True:\n    jsonl.append(sys.argv[1], {'i': i, 'pad': 'x' * 4000}); i += 1\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], cwd=os.getcwd())
    deadline = time.time() + 30
    while time.time() < deadline and (not path.exists() or path.stat().st_size < 40_000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a trailing fragment is allowed; a torn middle line is not
        records = jsonl.read(path)
    assert len(records) >= 5
    assert [r["i"] for r in records] == list(range(len(records)))
    lines = path.read_bytes().split(b"\n")
    assert all(json.loads(line) for line in lines[:-1])


def call(ledger, role, definition, usage, cost, model="m1"):
    now = time.time()
    return ledger.call(role=role, phase="p", definition=definition, candidate_id=None, iteration=1, backend="x",
                       provider="prov", model=model, prompt=f"prompt {role}", response="resp", usage=usage,
                       cost_usd=cost, cost_source="test" if cost is not None else "unmapped", t_start=now, t_end=now)


def test_summary_totals_by_definition_role_and_model(tmp_path):
    ledger = Ledger(tmp_path, "run-1")
    call(ledger, "planner", "d1", Usage(100, 10, cache_read=40), 0.5)
    call(ledger, "coder", "d1", Usage(200, 20, reasoning=5), None, model="m2")
    call(ledger, "coder", "d2", Usage(300, 30), 0.25)
    ledger.human_input(kind="redirect", source="r.md", text="go left", iteration=2, definition="d1")
    again = Ledger(tmp_path, "run-2")  # reopening continues the sequence
    record = call(again, "planner", "d2", Usage(1, 1), 0.0)
    assert record["seq"] == 5 and (tmp_path / "calls" / "00005.json").exists()
    summary = summarize(jsonl.read(tmp_path / "ledger.jsonl"))
    total = summary["total"]
    assert (total["calls"], total["gen_ai.usage.input_tokens"], total["gen_ai.usage.output_tokens"]) == (4, 601, 61)
    assert total["cost_usd"] == 0.75 and total["cost_unknown_calls"] == 1
    assert summary["by_definition"]["d1"]["gen_ai.usage.cache_read.input_tokens"] == 40
    assert summary["by_role"]["coder"]["gen_ai.usage.reasoning.output_tokens"] == 5
    assert summary["by_model"]["m2"]["calls"] == 1 and summary["runs"] == ["run-1", "run-2"]
    assert summary["human_inputs"][0]["input_kind"] == "redirect"
    stored = json.loads((tmp_path / "calls" / "00001.json").read_text())
    assert stored["prompt"] == "prompt planner" and stored["usage"]["gen_ai.usage.input_tokens"] == 100


def test_ledger_command_prints_tables_and_json(tmp_path):
    ledger = Ledger(tmp_path, "run-1")
    call(ledger, "planner", "d1", Usage(100, 10), 0.5)
    out = cli_runner().invoke(ledger_command, [str(tmp_path)])
    assert out.exit_code == 0 and "planner" in out.output and "0.500000" in out.output
    out = cli_runner().invoke(ledger_command, [str(tmp_path), "--json"])
    assert json.loads(out.output)["total"]["gen_ai.usage.input_tokens"] == 100
    out = cli_runner().invoke(ledger_command, [str(tmp_path / "nothing")])
    assert out.exit_code == 1 and "no ledger.jsonl" in out.output


def test_otel_usage_import_attributes_calls_to_candidates(tmp_path):
    ledger = Ledger(tmp_path, "run-1")
    for cid, t in (("c0001", 1000.0), ("c0002", 2000.0)):
        ledger.tool(name="start_candidate", call_id=None, definition="d1", candidate_id=cid, t_start=t, t_end=t,
                    ok=True, summary="", source="mcp:x")
    flat = tmp_path / "spans.jsonl"  # flat records, one per line (an exporter's file, or a proxy's log)
    flat.write_text("\n".join(json.dumps(r) for r in [
        {"span_id": "s1", "start_time": "1970-01-01T00:25:00Z",
         "attributes": {"gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 10,
                        "gen_ai.request.model": "m-a", "gen_ai.provider.name": "anthropic"}},
        {"span_id": "s2", "start_time": 2500.0, "attributes": {"gen_ai.usage.prompt_tokens": 200,
                                                                "gen_ai.usage.completion_tokens": 20}},
        {"span_id": "s3", "start_time": 10.0, "attributes": {"gen_ai.operation.name": "execute_tool"}},
        {"span_id": "s4", "start_time": 10.0, "attributes": {"gen_ai.usage.input_tokens": 5,
                                                              "fib_sdk.candidate_id": "c0002",
                                                              "fib_sdk.cost.usd": 0.25}}]) + "\n")
    logs = tmp_path / "logs.json"  # OTLP/JSON log records, attributes as key/value lists
    logs.write_text(json.dumps({"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "codex"}}]}, "scopeLogs": [{"logRecords": [
            {"timeUnixNano": str(int(2100 * 1e9)), "attributes": [
                {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "300"}},
                {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "30"}},
                {"key": "gen_ai.usage.reasoning.output_tokens", "value": {"intValue": "7"}}]}]}]}]}))
    out = cli_runner().invoke(ledger_command, [str(tmp_path), "--json", "--import-otel", str(flat),
                                              "--import-otel", str(logs), "--agent", "claude-code"])
    assert out.exit_code == 0, out.output
    assert "3 usage record(s) imported" in out.output and "1 usage record(s) imported" in out.output
    calls = [r for r in jsonl.read(tmp_path / "ledger.jsonl") if r["kind"] == "call"]
    assert [(c["candidate_id"], c["gen_ai.usage.input_tokens"]) for c in calls] == [
        ("c0001", 100), ("c0002", 200), ("c0002", 5), ("c0002", 300)]
    assert calls[0]["gen_ai.provider.name"] == "anthropic" and calls[0]["fib_sdk.agent"] == "claude-code"
    assert calls[2]["fib_sdk.cost.usd"] == 0.25 and calls[3]["gen_ai.usage.reasoning.output_tokens"] == 7
    assert not (tmp_path / "calls" / f"{calls[0]['seq']:05d}.json").exists()  # nothing to replay in an import
    again = cli_runner().invoke(ledger_command, [str(tmp_path), "--import-otel", str(flat)])
    assert "0 usage record(s) imported, 3 already in the ledger" in again.output
    summary = summarize(jsonl.read(tmp_path / "ledger.jsonl"))
    assert summary["by_role"]["external-agent"]["calls"] == 4 and summary["total"]["cost_unknown_calls"] == 3

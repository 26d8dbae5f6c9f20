"""litellm backend through a scripted fake `completion` (no network): tool sessions land exactly in the ledger,
usage normalisation, retries counted once under one deadline, budgets enforced before a call, malformed replies
re-asked once, per-candidate turn budgets."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))
from agent_fakes import (DEF, TOY_ROOT, AuthenticationError, CpuHooks, RateLimitError,  # noqa: E402
                         ScriptedCompletion, chat_response, fenced, tool_reply)

from sdk.agent import jsonl  # noqa: E402
from sdk.agent.backends import LiteLLMBackend, ModelCallError, Request, normalize_usage  # noqa: E402
from sdk.agent.ledger import summarize  # noqa: E402
from sdk.agent.loop import RunConfig, run  # noqa: E402

POINT = {"BLOCK": 256, "UNROLL": 2, "VECTOR": True}
PLAN = fenced({"parent": None, "direction": "bigger block", "template": "toy_scale", "params": POINT})
PLAN2 = fenced({"parent": "c0001", "direction": "edit the kernel", "template": "toy_scale", "params": POINT})
HACK = """--- a/main.py
+++ b/main.py
@@ -3,4 +3,6 @@
 import torch
+_CACHE = {}
 
 
 def run(x: torch.Tensor, y: torch.Tensor) -> None:
+    key = x.data_ptr()
     y.copy_(x * 2.0)
"""


def loop_config(tmp_path, **kw) -> RunConfig:
    return RunConfig(run_dir=tmp_path / "run", definitions=[DEF], template="toy_scale", templates_root=TOY_ROOT,
                     backend="litellm", model="scripted/model", compile_check="never", **kw)


def backend(script, **kw) -> tuple[LiteLLMBackend, ScriptedCompletion]:
    fake = ScriptedCompletion(script)
    return LiteLLMBackend("scripted/model", completion=fake, sleep=lambda s: None, **kw), fake


def calls_of(tmp_path) -> list[dict]:
    return [r for r in jsonl.read(tmp_path / "run" / "ledger.jsonl") if r["kind"] == "call"]


def test_tool_session_run_has_exact_ledger_totals(tmp_path):
    llm, fake = backend([
        chat_response(PLAN, 1200, 300, cached=200, cost=0.0021),
        tool_reply(2500, 700, ("render_template", {"params": POINT}), reasoning=150, cost=0.0044),
        tool_reply(2600, 50, ("finish", {"summary": "rendered"}), cost=0.0005),
        chat_response(PLAN2, 1300, 250),                                       # no cost known -> null
        tool_reply(2700, 900, ("apply_patch", {"diff": HACK}), cached=1000, reasoning=50, cost=0.005),
        tool_reply(2800, 30, ("finish", {"summary": "cached"}), cost=0.0001)])
    summary = run(loop_config(tmp_path, max_iters=2), hooks=CpuHooks(), backend=llm)
    total = summary["ledger"]["total"]
    assert total["calls"] == 6 and len(fake.calls) == 6
    assert total["gen_ai.usage.input_tokens"] == 1200 + 2500 + 2600 + 1300 + 2700 + 2800
    assert total["gen_ai.usage.output_tokens"] == 300 + 700 + 50 + 250 + 900 + 30
    assert total["gen_ai.usage.cache_read.input_tokens"] == 1200
    assert total["gen_ai.usage.reasoning.output_tokens"] == 200
    assert total["cost_usd"] == pytest.approx(0.0021 + 0.0044 + 0.0005 + 0.005 + 0.0001)
    assert total["cost_unknown_calls"] == 1
    assert summary["ledger"]["by_role"]["coder"]["calls"] == 4
    records = jsonl.read(tmp_path / "run" / "ledger.jsonl")
    assert summarize(records)["total"] == total  # recomputed from the file alone
    calls = calls_of(tmp_path)
    assert [c["candidate_id"] for c in calls] == [None, "c0001", "c0001", None, "c0002", "c0002"]
    assert [c["turn"] for c in calls] == [None, 0, 1, None, 0, 1]
    assert [c["fib_sdk.tool_calls"] for c in calls][1:3] == [["render_template"], ["finish"]]
    # the tools the model saw, and every tool run as an execute_tool event with its candidate
    assert {t["function"]["name"] for t in fake.calls[1]["tools"]} >= {"apply_patch", "compile", "gate", "bench"}
    tools = [r for r in records if r["kind"] == "tool"]
    assert [(t["candidate_id"], t["gen_ai.tool.name"]) for t in tools] == [
        ("c0001", "render_template"), ("c0001", "finish"), ("c0002", "apply_patch"), ("c0002", "finish")]
    # the second turn sends the first turn's tool result back to the model
    second = fake.calls[2]["messages"]
    assert second[-1]["role"] == "tool" and second[-1]["content"].startswith("rendered templates/toy_scale")
    stored = json.loads((tmp_path / "run" / "calls" / f"{calls[2]['seq']:05d}.json").read_text())
    assert [m["role"] for m in stored["new_messages"]] == ["tool"]  # only what is new (its reply: the call before)
    assert stored["message"]["tool_calls"][0]["function"]["name"] == "finish"
    cands = jsonl.read(tmp_path / "run" / "candidates.jsonl")
    assert cands[0]["params"] == POINT and cands[0]["decision"] == "blocked"
    # the patch keys a cache on data_ptr: the static scan rejects it before any build
    assert cands[1]["parent"] == "c0001" and cands[1]["overlay_files"] == ["main.py"]
    assert cands[1]["decision"] == "reject" and cands[1]["statuses"]["scan"].startswith("blocked: pointer-key")
    assert (tmp_path / "run" / "candidates" / "c0002" / "patches" / "001.diff").read_text() == HACK


def test_usage_normalisation_to_otel_inclusive_counts():
    anthropic = normalize_usage({"input_tokens": 100, "output_tokens": 40, "cache_read_input_tokens": 500,
                                 "cache_creation_input_tokens": 60})
    assert (anthropic.input_tokens, anthropic.cache_read, anthropic.cache_creation) == (660, 500, 60)
    responses = normalize_usage({"input_tokens": 900, "output_tokens": 80,
                                 "input_tokens_details": {"cached_tokens": 300},
                                 "output_tokens_details": {"reasoning_tokens": 30}})
    assert (responses.input_tokens, responses.cache_read, responses.reasoning) == (900, 300, 30)
    assert normalize_usage(None).input_tokens == 0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    sleeps: list


def test_transient_errors_are_retried_here_under_one_deadline(tmp_path):
    clock = FakeClock()
    clock.sleeps = []
    fake = ScriptedCompletion([RateLimitError("slow down"), RateLimitError("again"), chat_response(PLAN, 10, 5),
                               AuthenticationError("bad key")])
    llm = LiteLLMBackend("scripted/model", completion=fake, sleep=clock.sleep, clock=clock, backoff_s=1.0,
                         prices=(1e-6, 2e-6), timeout_s=100)
    summary = run(loop_config(tmp_path, max_iters=2), hooks=CpuHooks(), backend=llm)
    assert clock.sleeps == [1.0, 2.0]
    assert [round(kw["timeout"], 6) for kw in fake.calls] == [100.0, 99.0, 97.0, 100.0]  # what is left of each call
    calls = calls_of(tmp_path)
    assert [c["fib_sdk.retries"] for c in calls] == [2, 0]
    assert calls[0]["fib_sdk.cost.source"] == "custom_price" and calls[0]["fib_sdk.cost.usd"] == pytest.approx(2e-5)
    assert calls[1]["error.type"] == "AuthenticationError" and calls[1]["gen_ai.usage.input_tokens"] == 0
    assert summary["definitions"][0]["stop_reason"].startswith("coder call failed: AuthenticationError")
    assert summary["model_calls"] == {"total": 2, "ok": 1}

    # the deadline covers retries and back-off: with 5 s, the 4 s back-off after the second failure never starts
    clock = FakeClock()
    clock.sleeps = []
    llm = LiteLLMBackend("m", completion=ScriptedCompletion([RateLimitError("a"), RateLimitError("b"),
                                                              chat_response("x", 1, 1)]),
                         sleep=clock.sleep, clock=clock, backoff_s=2.0, timeout_s=5.0, max_retries=5)
    with pytest.raises(ModelCallError) as err:
        llm.complete(Request("planner", "plan", "p", {}))
    assert clock.sleeps == [2.0] and err.value.retries == 1 and err.value.error_type == "RateLimitError"


def test_token_budget_is_enforced_before_the_call(tmp_path):
    llm, fake = backend([chat_response(PLAN, 900, 200)] + [tool_reply(800, 100, ("finish", {"summary": "x"}))] * 4)
    budget = 6100  # the planner call uses 1100; the coder prompt alone is estimated above 5000 tokens
    summary = run(loop_config(tmp_path, max_iters=3, budget_tokens=budget), hooks=CpuHooks(), backend=llm)
    calls = calls_of(tmp_path)
    used = sum(c["gen_ai.usage.input_tokens"] + c["gen_ai.usage.output_tokens"] for c in calls)
    assert used <= budget  # never overrun: the coder's long prompt does not fit what is left
    stop = summary["definitions"][0]["stop_reason"]
    assert stop.startswith("run token budget: the next call needs ~") and f"{budget - 1100} of {budget} left" in stop
    assert len(fake.calls) == 1  # the planner's output was capped to what its estimated prompt left over
    assert fake.calls[0]["max_tokens"] == budget - calls[0]["fib_sdk.prompt_tokens_estimate"]
    # a budget with room caps the output of each call to what is left
    llm, fake = backend([chat_response(PLAN, 900, 200), tool_reply(800, 100, ("finish", {"summary": "x"}))])
    run(loop_config(tmp_path / "b", max_iters=1, budget_tokens=200_000), hooks=CpuHooks(), backend=llm)
    first = [r for r in jsonl.read(tmp_path / "b" / "run" / "ledger.jsonl") if r["kind"] == "call"][1]
    assert fake.calls[1]["max_tokens"] == min(8192, 200_000 - 1100 - first["fib_sdk.prompt_tokens_estimate"])


def test_malformed_replies_are_reasked_once_then_end_the_candidate(tmp_path):
    llm, fake = backend([
        chat_response(PLAN, 10, 5),
        chat_response("I would render the point.", 10, 5),                       # no tool call: re-asked
        tool_reply(10, 5, ("render_template", {"params": POINT})),               # fine: strikes reset
        tool_reply(10, 5, ("render_template", '{"params": {"BLOCK": 64,')),       # broken JSON: re-asked
        tool_reply(10, 5, ("delete_everything", {})),                             # unknown tool: second strike
    ])
    summary = run(loop_config(tmp_path, max_iters=1), hooks=CpuHooks(), backend=llm)
    [record] = jsonl.read(tmp_path / "run" / "candidates.jsonl")
    assert record["session"]["reason"] == ("malformed reply twice in a row (unknown tool 'delete_everything'; the "
                                           "tools are list_files, read_file, apply_patch, render_template, compile, "
                                           "gate, bench, profile, finish)")
    assert record["decision"] == "reject" and record["statuses"]["coder"].startswith("failed: malformed reply twice")
    assert "called no tool" in fake.calls[2]["messages"][-1]["content"]
    assert fake.calls[4]["messages"][-1]["content"].startswith("malformed call: render_template: arguments are not")
    assert summary["definitions"][0]["stop_reason"] == "iteration budget reached (1)"


def test_turn_and_candidate_token_budgets_end_a_candidate(tmp_path):
    looping = [tool_reply(100, 10, ("list_files", {}))] * 3
    llm, _ = backend([chat_response(PLAN, 10, 5), *looping])
    run(loop_config(tmp_path, max_iters=1, max_turns=3), hooks=CpuHooks(), backend=llm)
    [record] = jsonl.read(tmp_path / "run" / "candidates.jsonl")
    assert record["session"] == {"reason": "turn budget reached (3 model turns)", "turns": 3, "tool_calls": 3}
    assert record["decision"] == "reject"
    llm, fake = backend([chat_response(PLAN, 10, 5), *looping])
    run(loop_config(tmp_path / "t", max_iters=1, candidate_tokens=5000), hooks=CpuHooks(), backend=llm)
    [record] = jsonl.read(tmp_path / "t" / "run" / "candidates.jsonl")
    assert record["session"]["reason"].startswith("candidate token budget: the next call needs ~")
    assert record["session"]["turns"] == 0 and len(fake.calls) == 1  # the brief alone is over 5000 tokens


def test_calls_in_flight_hold_their_share_of_the_run_budget():
    from sdk.agent.session import Budgets, RunBudgetExhausted
    used = {"tokens": 0}
    budgets = Budgets(lambda cid: used["tokens"], run_tokens=20_000, max_output_tokens=4000)
    first, second = object(), object()
    assert budgets.reserve(first, 9000) == 4000          # holds 13000 until released
    with pytest.raises(RunBudgetExhausted, match="7000 of 20000 left, 13000 held by calls in flight"):
        budgets.reserve(second, 9000)
    used["tokens"] = 9500                                 # the first call finished: its real usage is recorded
    budgets.release(first)
    assert budgets.reserve(second, 9000) == 20_000 - 9500 - 9000

"""Token ledger: one JSONL line per model call, keyed like OpenTelemetry GenAI span attributes.

Token counts follow the OTel inclusive convention (cache reads/creations are part of input tokens, reasoning is
part of output tokens). Cost has no OTel attribute, so it lives under the `fib_sdk.` namespace with its source;
it is null when nobody knows the price. Prompts and responses are stored as sha256 in the ledger and in full under
`calls/<seq>.json` (the replay backend reads those: a tool session's call stores the messages added since its
previous call, i.e. the tool results of that call's reply, and its own reply with the tool calls, so the whole
conversation is the concatenation). Human inputs (policy, references, redirect notes)
are ledger lines too, so a run's record shows what the humans fed in and when; tool executions are
`execute_tool` events (the OTel GenAI operation name) with the candidate they worked on. Appends are serialised
by a lock: several candidates' sessions write concurrently.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tabulate import tabulate

from . import jsonl

SCHEMA = "fib-sdk.ledger/1"
IN, OUT = "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"
CACHE_READ, CACHE_WRITE = "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens"
REASONING = "gen_ai.usage.reasoning.output_tokens"
COST, COST_SOURCE = "fib_sdk.cost.usd", "fib_sdk.cost.source"
TOKEN_KEYS = (IN, OUT, CACHE_READ, CACHE_WRITE, REASONING)


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0        # inclusive of cache reads and cache creation
    output_tokens: int = 0       # inclusive of reasoning
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int = 0

    def as_attrs(self) -> dict:
        return {IN: self.input_tokens, OUT: self.output_tokens, CACHE_READ: self.cache_read,
                CACHE_WRITE: self.cache_creation, REASONING: self.reasoning}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Ledger:
    """Appends to `<run_dir>/ledger.jsonl`; reopening a run folder continues its sequence numbers."""

    def __init__(self, run_dir: Path, run_id: str):
        self.run_dir, self.run_id = Path(run_dir), run_id
        self.path = self.run_dir / "ledger.jsonl"
        self.calls_dir = self.run_dir / "calls"
        self.records = jsonl.read(self.path)
        self.seq = max((r.get("seq", 0) for r in self.records), default=0)
        self._lock = threading.RLock()

    def _append(self, record: dict, call_file: dict | None = None) -> dict:
        with self._lock:
            self.seq += 1
            record = {"schema": SCHEMA, "run_id": self.run_id, "trace_id": self.run_id,
                      "span_id": uuid.uuid4().hex[:16], "seq": self.seq, **record}
            if call_file is not None:  # the full call first: a ledger line always has its calls/ file
                self.calls_dir.mkdir(parents=True, exist_ok=True)
                (self.calls_dir / f"{self.seq:05d}.json").write_text(json.dumps({"seq": self.seq, **call_file},
                                                                                indent=1))
            jsonl.append(self.path, record)
            self.records.append(record)
            return record

    def call(self, *, role: str, phase: str, definition: str, candidate_id: str | None, iteration: int,
             backend: str, provider: str, model: str, prompt: str, response: str, usage: Usage,
             cost_usd: float | None, cost_source: str, t_start: float, t_end: float,
             response_model: str | None = None, response_id: str | None = None,
             finish_reasons: list | None = None, temperature: float | None = None, seed: int | None = None,
             retries: int = 0, error_type: str | None = None, skills: list | None = None,
             prompt_template: dict | None = None, extra: dict | None = None, turn: int | None = None,
             message: dict | None = None, new_messages: list | None = None, tools: list | None = None,
             prompt_estimate: int | None = None, keep_call: bool = True) -> dict:
        tool_calls = (message or {}).get("tool_calls") or []
        record = {
            "kind": "call", "ts_start": utc(t_start), "ts_end": utc(t_end),
            "duration_ms": round((t_end - t_start) * 1000, 3),
            "definition": definition, "phase": phase, "role": role, "candidate_id": candidate_id,
            "iteration": iteration, "turn": turn, "skills": skills or [], "prompt_template": prompt_template,
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": model,
            "gen_ai.response.model": response_model, "gen_ai.response.id": response_id,
            "gen_ai.response.finish_reasons": finish_reasons, "gen_ai.request.temperature": temperature,
            "gen_ai.request.seed": seed, **usage.as_attrs(), COST: cost_usd, COST_SOURCE: cost_source,
            "fib_sdk.backend": backend, "fib_sdk.prompt_sha256": sha256(prompt),
            "fib_sdk.response_sha256": sha256(response), "fib_sdk.retries": retries,
            "fib_sdk.tool_calls": [c["function"]["name"] for c in tool_calls],
            "fib_sdk.prompt_tokens_estimate": prompt_estimate, "error.type": error_type, **(extra or {})}
        call_file = {"role": role, "phase": phase, "definition": definition, "candidate_id": candidate_id,
                     "turn": turn, "model": model, "prompt_sha256": sha256(prompt),
                     "prompt": prompt if new_messages is None else None, "new_messages": new_messages,
                     "tools": tools, "response": response, "message": message, "usage": usage.as_attrs(),
                     "error.type": error_type}
        return self._append(record, call_file if keep_call else None)

    def tool(self, *, name: str, call_id: str | None, definition: str, candidate_id: str | None,
             t_start: float, t_end: float, ok: bool, summary: str, source: str) -> dict:
        """One tool execution (by a model session, the offline search or an MCP client)."""
        return self._append({"kind": "tool", "ts_start": utc(t_start), "ts_end": utc(t_end),
                             "duration_ms": round((t_end - t_start) * 1000, 3),
                             "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                             "gen_ai.tool.call.id": call_id, "definition": definition,
                             "candidate_id": candidate_id, "fib_sdk.tool.ok": ok,
                             "fib_sdk.tool.summary": summary[:300], "fib_sdk.tool.source": source})

    def human_input(self, *, kind: str, source: str, text: str, iteration: int, definition: str | None) -> dict:
        now = time.time()
        return self._append({"kind": "human_input", "ts_start": utc(now), "ts_end": utc(now),
                             "gen_ai.operation.name": "human_input", "input_kind": kind, "source": source,
                             "definition": definition, "iteration": iteration, "fib_sdk.input_sha256": sha256(text),
                             "chars": len(text)})

    def event(self, name: str, **attrs) -> dict:
        now = time.time()
        return self._append({"kind": "event", "ts_start": utc(now), "ts_end": utc(now),
                             "gen_ai.operation.name": name, **attrs})

    def tokens_used(self, candidate_id: str | None = None) -> int:
        """Input + output tokens of the recorded calls (of one candidate when given)."""
        with self._lock:
            return sum(r.get(IN, 0) + r.get(OUT, 0) for r in self.records if r.get("kind") == "call"
                       and (candidate_id is None or r.get("candidate_id") == candidate_id))


def _blank() -> dict:
    return {"calls": 0, **{k: 0 for k in TOKEN_KEYS}, "cost_usd": 0.0, "cost_unknown_calls": 0, "errors": 0}


def _add(row: dict, record: dict) -> None:
    row["calls"] += 1
    for key in TOKEN_KEYS:
        row[key] += int(record.get(key) or 0)
    if record.get(COST) is None:
        row["cost_unknown_calls"] += 1
    else:
        row["cost_usd"] += float(record[COST])
    row["errors"] += record.get("error.type") is not None


def summarize(records: list[dict]) -> dict:
    """Totals and breakdowns by definition, role and model, computed from the call lines themselves."""
    calls = [r for r in records if r.get("kind") == "call"]
    total, groups = _blank(), {"definition": defaultdict(_blank), "role": defaultdict(_blank),
                               "model": defaultdict(_blank)}
    for record in calls:
        _add(total, record)
        _add(groups["definition"][record.get("definition") or "-"], record)
        _add(groups["role"][record.get("role") or "-"], record)
        _add(groups["model"][record.get("gen_ai.request.model") or "-"], record)
    for row in [total, *(r for g in groups.values() for r in g.values())]:
        row["cost_usd"] = round(row["cost_usd"], 10)
    inputs = [r for r in records if r.get("kind") == "human_input"]
    return {"runs": sorted({r.get("run_id") for r in records if r.get("run_id")}), "total": total,
            **{f"by_{k}": {name: dict(row) for name, row in sorted(g.items())} for k, g in groups.items()},
            "human_inputs": [{k: r.get(k) for k in ("seq", "input_kind", "source", "iteration",
                                                    "fib_sdk.input_sha256")} for r in inputs]}


def format_summary(summary: dict) -> str:
    short = {IN: "input", OUT: "output", CACHE_READ: "cache_read", CACHE_WRITE: "cache_write", REASONING: "reasoning"}

    def table(title: str, rows: dict) -> str:
        body = [[name, row["calls"], *(row[k] for k in TOKEN_KEYS),
                 f"{row['cost_usd']:.6f}" + (f" (+{row['cost_unknown_calls']} unpriced)"
                                             if row["cost_unknown_calls"] else "")] for name, row in rows.items()]
        head = [title, "calls", *(short[k] for k in TOKEN_KEYS), "cost_usd"]
        return tabulate(body, headers=head, tablefmt="github", disable_numparse=True)

    parts = [f"runs: {', '.join(summary['runs']) or '-'}", table("total", {"all": summary["total"]})]
    for key in ("definition", "role", "model"):
        parts.append(table(key, summary[f"by_{key}"]))
    if summary["human_inputs"]:
        parts.append(tabulate([[h["seq"], h["input_kind"], h["source"], h["iteration"],
                                (h["fib_sdk.input_sha256"] or "")[:16]] for h in summary["human_inputs"]],
                              headers=["seq", "human input", "source", "iteration", "sha256"], tablefmt="github"))
    return "\n\n".join(parts)


def load_run(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "ledger.jsonl"
    if not path.exists():
        from ..errors import BadInputError
        raise BadInputError(f"{run_dir}: no ledger.jsonl (not a run folder)")
    return jsonl.read(path)

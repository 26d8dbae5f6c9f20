"""What a solution cost to make: tokens and dollars by role, model, phase and definition.

Read from the agent loop's ledger at `solutions/<dir>/ledger.jsonl` (one JSON line per model call, OpenTelemetry
GenAI keys). Reading is tolerant: token counts under the OTel names or the common provider names, cost under any
of a few keys, non-call lines (human inputs, events) and unreadable lines skipped and counted. A solution without
a ledger was written by hand or generated offline: it is reported as zero, with that reason.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from .. import jsonl
from ..solutions import SolutionPackage

LEDGER = "ledger.jsonl"
NO_LEDGER = "hand-tuned / offline-generated: no model calls"
INPUT_KEYS = ("gen_ai.usage.input_tokens", "input_tokens", "prompt_tokens")
OUTPUT_KEYS = ("gen_ai.usage.output_tokens", "output_tokens", "completion_tokens")
COST_KEYS = ("fib_sdk.cost.usd", "fib.cost.usd", "cost_usd", "cost.usd", "cost")
MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "model")
GROUPS = {"role": ("role",), "model": MODEL_KEYS, "phase": ("phase",), "definition": ("definition",)}


def _first(record: dict, keys: tuple[str, ...]):
    return next((record[k] for k in keys if record.get(k) is not None), None)


def _blank() -> dict:
    return {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "unpriced_calls": 0}


def _add(row: dict, record: dict) -> None:
    row["calls"] += 1
    row["input_tokens"] += int(_first(record, INPUT_KEYS) or 0)
    row["output_tokens"] += int(_first(record, OUTPUT_KEYS) or 0)
    cost = _first(record, COST_KEYS)
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        row["cost_usd"] += float(cost)
    else:
        row["unpriced_calls"] += 1


def _is_call(record: dict) -> bool:
    if "kind" in record:
        return record["kind"] == "call"
    return _first(record, INPUT_KEYS + OUTPUT_KEYS) is not None


def summarize(path: Path | None) -> dict:
    """Totals and per-group rows of a ledger file; `path=None` or a missing file gives zeros and the reason."""
    summary = {"ledger": None, "reason": NO_LEDGER, "total": _blank(), "skipped_lines": 0,
               "by": {group: {} for group in GROUPS}}
    if path is None or not Path(path).is_file():
        return summary
    groups = {group: defaultdict(_blank) for group in GROUPS}
    summary.update(ledger=LEDGER, reason=None)
    for line in jsonl.read(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            summary["skipped_lines"] += 1
            continue
        if not _is_call(record):
            continue
        _add(summary["total"], record)
        for group, keys in GROUPS.items():
            _add(groups[group][str(_first(record, keys) or "-")], record)
    for row in [summary["total"], *(r for g in groups.values() for r in g.values())]:
        row["cost_usd"] = round(row["cost_usd"], 6)
    summary["by"] = {group: {k: rows[k] for k in sorted(rows)} for group, rows in groups.items()}
    if summary["total"]["calls"] == 0:
        summary["reason"] = "the ledger records no model calls"
    return summary


def package_ledger(package: SolutionPackage) -> Path | None:
    path = package.root / LEDGER
    return path if path.is_file() else None


def _table(title: str, rows: dict) -> str:
    body = [[name, r["calls"], r["input_tokens"], r["output_tokens"], f"{r['cost_usd']:.6f}", r["unpriced_calls"]]
            for name, r in rows.items()]
    return tabulate(body, headers=[title, "calls", "input tokens", "output tokens", "cost (USD)", "unpriced calls"],
                    tablefmt="github", disable_numparse=True)


def render(solution: str, summary: dict) -> str:
    total = summary["total"]
    lines = [f"# Cost ledger: {solution}", ""]
    if summary["reason"]:
        lines += [f"Tokens and cost: zero ({summary['reason']}).", ""]
    else:
        lines += [f"From `{summary['ledger']}` (copied beside this file, one line per model call). Input tokens "
                  "include cache reads; output tokens include reasoning. Calls without a price are counted as "
                  "unpriced, not as free.", ""]
    if summary["skipped_lines"]:
        lines += [f"{summary['skipped_lines']} unreadable ledger line(s) were skipped.", ""]
    lines += [_table("total", {"all": total}), ""]
    for group in GROUPS:
        if summary["by"][group]:
            lines += [f"## By {group}", "", _table(group, summary["by"][group]), ""]
    return "\n".join(lines)

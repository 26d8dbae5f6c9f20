"""Import an external coding agent's token usage into a run's ledger, from its OpenTelemetry export.

An agent driving the SDK over MCP makes its own model calls, which the SDK never sees. Agents that export
OpenTelemetry (spans, or log records) carry their usage under the GenAI semantic-convention keys; this reads
  gen_ai.usage.input_tokens / output_tokens (or the older prompt_tokens / completion_tokens),
  gen_ai.usage.cache_read.input_tokens, gen_ai.usage.cache_creation.input_tokens,
  gen_ai.usage.reasoning.output_tokens, gen_ai.request.model, gen_ai.response.model,
  gen_ai.provider.name (or gen_ai.system), gen_ai.operation.name, gen_ai.response.id,
  fib_sdk.candidate_id and fib_sdk.cost.usd (optional, this SDK's own namespace)
from OTLP/JSON (`resourceSpans` / `resourceLogs`, attributes as key/value lists) or JSONL of flat records.
A record without any gen_ai.usage key is skipped. Input tokens are taken as the exporter reports them (OTel
counts cache reads inside input tokens). Each imported record is attributed to a candidate: its
fib_sdk.candidate_id, else the latest candidate whose first MCP tool call started at or before the record's time.
Imports are idempotent: a record already imported (same key) is skipped.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from ..errors import BadInputError
from .ledger import Ledger, Usage, utc

USAGE_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.prompt_tokens",
              "gen_ai.usage.completion_tokens")


def _value(v):
    """An OTLP AnyValue ({"intValue": "12"}, {"stringValue": "x"}, ...) or a plain JSON value."""
    if not isinstance(v, dict):
        return v
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return v


def _attrs(items) -> dict:
    if isinstance(items, dict):
        return {k: _value(v) for k, v in items.items()}
    return {a["key"]: _value(a.get("value")) for a in items or [] if isinstance(a, dict) and "key" in a}


def _nanos(value) -> float | None:
    if value in (None, "", 0, "0"):
        return None
    return int(value) / 1e9


def _time(value) -> float | None:
    if isinstance(value, (int, float)):
        return float(value) / (1e9 if value > 1e12 else 1)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def records_from(data) -> list[dict]:
    """Flat {attributes, start, end, resource, id} records from any of the accepted shapes."""
    out = []
    if isinstance(data, dict) and ("resourceSpans" in data or "resourceLogs" in data):
        for rs in data.get("resourceSpans", []):
            resource = _attrs((rs.get("resource") or {}).get("attributes"))
            for ss in rs.get("scopeSpans", []) or rs.get("instrumentationLibrarySpans", []):
                for span in ss.get("spans", []):
                    out.append({"attributes": _attrs(span.get("attributes")), "resource": resource,
                                "start": _nanos(span.get("startTimeUnixNano")),
                                "end": _nanos(span.get("endTimeUnixNano")),
                                "id": f"{span.get('traceId', '')}:{span.get('spanId', '')}"})
        for rl in data.get("resourceLogs", []):
            resource = _attrs((rl.get("resource") or {}).get("attributes"))
            for sl in rl.get("scopeLogs", []):
                for log in sl.get("logRecords", []):
                    t = _nanos(log.get("timeUnixNano")) or _nanos(log.get("observedTimeUnixNano"))
                    out.append({"attributes": _attrs(log.get("attributes")), "resource": resource, "start": t,
                                "end": t, "id": f"{log.get('traceId', '')}:{log.get('spanId', '')}:{t}"})
    elif isinstance(data, dict):
        attrs = _attrs(data.get("attributes")) if "attributes" in data else dict(data)
        start = _time(data.get("start_time") or data.get("startTimeUnixNano") or data.get("ts_start")
                      or data.get("timestamp"))
        end = _time(data.get("end_time") or data.get("endTimeUnixNano") or data.get("ts_end")) or start
        resource = _attrs((data.get("resource") or {}).get("attributes", data.get("resource") or {})) \
            if isinstance(data.get("resource"), dict) else {}
        out.append({"attributes": attrs, "resource": resource, "start": start, "end": end,
                    "id": str(data.get("span_id") or data.get("spanId") or data.get("context", {}).get("span_id")
                              or "")})
    elif isinstance(data, list):
        for item in data:
            out += records_from(item)
    return out


def read_export(path: Path) -> list[dict]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read ({exc})") from None
    try:
        return records_from(json.loads(text))
    except json.JSONDecodeError:
        pass
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out += records_from(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BadInputError(f"{path}:{number}: not JSON ({exc.msg})") from None
    return out


def usage_of(attrs: dict) -> Usage:
    def number(*keys) -> int:
        for key in keys:
            if attrs.get(key) is not None:
                return int(attrs[key])
        return 0
    return Usage(input_tokens=number("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
                 output_tokens=number("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
                 cache_read=number("gen_ai.usage.cache_read.input_tokens"),
                 cache_creation=number("gen_ai.usage.cache_creation.input_tokens"),
                 reasoning=number("gen_ai.usage.reasoning.output_tokens"))


def candidate_starts(records: list[dict]) -> list[tuple[float, str, str | None]]:
    """(time of the first tool call, candidate, definition) per candidate worked on through tools."""
    first: dict[str, tuple[float, str | None]] = {}
    for r in records:
        if r.get("kind") == "tool" and r.get("candidate_id"):
            t = _time(r.get("ts_start"))
            if t is not None and (r["candidate_id"] not in first or t < first[r["candidate_id"]][0]):
                first[r["candidate_id"]] = (t, r.get("definition"))
    return sorted((t, cid, d) for cid, (t, d) in first.items())


def import_usage(run_dir: str | Path, export: str | Path, agent: str | None = None) -> tuple[int, int]:
    """(imported, skipped as already present) for one export file."""
    run_dir = Path(run_dir)
    if not (run_dir / "ledger.jsonl").exists():
        raise BadInputError(f"{run_dir}: no ledger.jsonl (not a run folder)")
    ledger = Ledger(run_dir, run_id=f"import-{Path(export).name}")
    known = {r.get("fib_sdk.import_key") for r in ledger.records if r.get("fib_sdk.import_key")}
    starts = candidate_starts(ledger.records)
    added = skipped = 0
    for item in read_export(Path(export)):
        attrs = item["attributes"]
        if not any(k in attrs for k in USAGE_KEYS):
            continue
        usage = usage_of(attrs)
        start = item["start"]
        raw_key = item["id"] or json.dumps([start, attrs], sort_keys=True, default=str)
        key = hashlib.sha256(f"{raw_key}|{usage.as_attrs()}".encode()).hexdigest()[:32]
        if key in known:
            skipped += 1
            continue
        known.add(key)
        cid, definition = attrs.get("fib_sdk.candidate_id"), attrs.get("fib_sdk.definition")
        if cid is not None and definition is None:
            definition = next((d for _, c, d in starts if c == cid), None)
        if cid is None and start is not None:
            before = [s for s in starts if s[0] <= start]
            if before:
                _, cid, definition = before[-1]
        name = agent or item["resource"].get("service.name") or "external-agent"
        model = attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model") or "unknown"
        cost = attrs.get("fib_sdk.cost.usd")
        t0 = start if start is not None else datetime.now(timezone.utc).timestamp()
        ledger.call(role="external-agent", phase=str(attrs.get("gen_ai.operation.name") or "chat"),
                    definition=definition, candidate_id=cid, iteration=0, backend=f"external:{name}",
                    provider=str(attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system") or name),
                    model=str(model), prompt="", response="", usage=usage,
                    cost_usd=float(cost) if cost is not None else None,
                    cost_source="imported: fib_sdk.cost.usd" if cost is not None else "unmapped: the export "
                                                                                       "has no cost attribute",
                    t_start=t0, t_end=item["end"] or t0, response_model=attrs.get("gen_ai.response.model"),
                    response_id=attrs.get("gen_ai.response.id"),
                    extra={"fib_sdk.import_key": key, "fib_sdk.imported_from": str(export),
                           "fib_sdk.agent": name, "fib_sdk.import_time": utc(datetime.now(timezone.utc).timestamp())},
                    keep_call=False)
        added += 1
    return added, skipped

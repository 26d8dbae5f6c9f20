"""The official contest workloads (uuid, axes, input kinds) as this project's JSONL, one Trace line each.

With an official dataset active (`--definitions DIR` / `FIB_DATASET_PATH`), its `workloads/**/<name>.jsonl` is used.

Inputs the official set reads from safetensors blobs keep their `safetensors` spec here; `sdk.inputs` loads the
blob when `FIB_DATASET_PATH` holds it and otherwise draws a seeded, realistic stand-in.
"""
from __future__ import annotations

import json
from pathlib import Path

from .._fib import Trace, Workload
from ..errors import BadInputError, one_line

HERE = Path(__file__).parent


INPUT_FIELDS = {"random": {"type"}, "scalar": {"type", "value"}, "safetensors": {"type", "path", "tensor_key"}}


def _check_fields(raw) -> None:
    """pydantic ignores unknown keys; a workload file with them is more likely wrong than extended."""
    if not isinstance(raw, dict):
        raise ValueError("a workload line must be a JSON object")
    for where, obj, allowed in (("line", raw, Trace.model_fields), ("workload", raw.get("workload") or {},
                                                                       Workload.model_fields)):
        unknown = set(obj) - set(allowed)
        if unknown:
            raise ValueError(f"unknown {where} field(s) {sorted(unknown)}")
    for name, spec in ((raw.get("workload") or {}).get("inputs") or {}).items():
        if isinstance(spec, dict) and (extra := set(spec) - INPUT_FIELDS.get(spec.get("type"), set(spec))):
            raise ValueError(f"input {name!r}: unknown field(s) {sorted(extra)}")


def parse_jsonl(path: Path, definition: str | None = None) -> list[Workload]:
    """Parse a workload JSONL file; a bad line raises BadInputError naming the file and line."""
    out = []
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read workloads ({exc})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            _check_fields(json.loads(line))
            trace = Trace.model_validate_json(line)
        except Exception as exc:
            raise BadInputError(f"{path}:{number}: invalid workload line ({one_line(exc)})") from None
        if definition and trace.definition != definition:
            raise BadInputError(f"{path}:{number}: workload of {trace.definition!r}, expected {definition!r}")
        out.append(trace.workload)
    return out


def load(definition: str) -> tuple[Workload, ...]:
    """The active workload list: the official dataset's when one is active and has it (see sdk.definitions.sources)."""
    from .. import definitions
    from ..definitions import sources

    if definition not in definitions.names():
        raise BadInputError(f"unknown definition {definition!r}; known: {', '.join(definitions.names())}")
    items = sources.active(definition).workloads
    if not items:
        raise BadInputError(f"no workloads for definition {definition!r}")
    return items


def select(definition: str, keys: list[str] | None = None) -> list[Workload]:
    """All workloads, or those whose uuid starts with one of `keys` (each key must match exactly one)."""
    all_ = list(load(definition))
    if not keys:
        return all_
    chosen = []
    for key in keys:
        hits = [w for w in all_ if w.uuid.startswith(key)]
        if len(hits) != 1:
            raise BadInputError(f"workload key {key!r} matches {len(hits)} workloads of {definition}")
        chosen.append(hits[0])
    return chosen

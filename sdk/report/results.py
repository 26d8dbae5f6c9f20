"""Reading benchmark results files (schema "fib-sdk.results/2", /1 still read) for the report, submit and merge:
every row is validated through `sdk.bench.rows.ResultRow`."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pydantic

from ..bench import scoring
from ..bench.rows import READABLE, SCHEMA, validate  # noqa: F401 - SCHEMA: what submit writes
from ..errors import BadInputError

ROW_KEYS = ("definition", "solution", "workload", "status")


@dataclass(frozen=True)
class ResultsFile:
    name: str  # file name only, so the report does not depend on the working directory
    sha256: str
    environment: dict


@dataclass(frozen=True)
class Results:
    files: list[ResultsFile]
    rows: list[dict]


def _load_one(path: Path) -> tuple[ResultsFile, list[dict]]:
    try:
        data = path.read_bytes()
        raw = json.loads(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{path}: not a readable results JSON ({exc})") from None
    if not isinstance(raw, dict) or raw.get("schema") not in READABLE:
        raise BadInputError(f"{path}: not a {' or '.join(READABLE)} results file")
    rows = raw.get("rows")
    if not isinstance(rows, list):
        raise BadInputError(f"{path}: 'rows' must be a list")
    for i, row in enumerate(rows):
        missing = [k for k in ROW_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise BadInputError(f"{path}: row {i} lacks {missing}")
        try:
            rows[i] = {**row, **validate(row)}
        except pydantic.ValidationError as exc:
            raise BadInputError(f"{path}: row {i} is malformed ({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']})") \
                from None
    return ResultsFile(path.name, hashlib.sha256(data).hexdigest(), dict(raw.get("environment") or {})), rows


def load_results(paths: list[Path]) -> Results:
    """All rows of all files, in file order. One (definition, solution, workload) may appear only once: rows from
    two runs are never mixed silently."""
    files, rows, seen = [], [], {}
    for path in paths:
        info, file_rows = _load_one(Path(path))
        for row in file_rows:
            key = (row["definition"], row["solution"], row["workload"])
            if key in seen:
                raise BadInputError(f"{info.name}: {key[1]} on workload {key[2]} of {key[0]} is also in {seen[key]}; "
                                    "pass one results file per definition and solution")
            seen[key] = info.name
        files.append(info)
        rows.extend(file_rows)
    if not files:
        raise BadInputError("no results files given")
    return Results(files, rows)


def ordered(rows: list[dict]) -> list[dict]:
    """Rows in a stable, readable order: by axis values, then workload uuid."""
    return sorted(rows, key=lambda r: (sorted((r.get("axes") or {}).items()), r["workload"]))


def axes_label(row: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((row.get("axes") or {}).items()))


def by_definition(rows: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """{definition: {solution: ordered rows}}, both levels sorted by name."""
    return {d: {s: ordered(r) for s, r in solutions.items()} for d, solutions in scoring.group(rows).items()}

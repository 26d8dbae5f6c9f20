"""JSON records over the SDK's kill-safe JSONL (`sdk.jsonl`: one os.write per line, then fsync).

Two additions for files that are reopened across runs: before appending, a trailing fragment left by a killed
writer is terminated so the next record starts on a fresh line; readers skip any unparsable line (such a fragment)
with a warning, and `sdk.jsonl.read` already drops a torn final line with one.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from .. import jsonl as base


def _terminate_fragment(path: Path) -> None:
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        complete = handle.read(1) == b"\n"
    if not complete:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)


def append(path: str | Path, record: dict) -> None:
    _terminate_fragment(Path(path))
    base.append(path, json.dumps(record, sort_keys=True, separators=(",", ":"), default=str))


def read(path: str | Path) -> list[dict]:
    """All complete records; unparsable lines are skipped with a warning."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for number, line in enumerate(base.read(path), 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            warnings.warn(f"{path}: skipping an unparsable record #{number} (torn by an earlier interrupted write)",
                          stacklevel=2)
    return out

"""Append-only JSONL that a kill cannot tear: each record is one os.write of the whole line, then fsync.

Readers skip a trailing line without its newline (a write cut short by the OS) and say so.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator


def append(path: str | Path, record: Any) -> None:
    text = record if isinstance(record, str) else json.dumps(record, separators=(",", ":"), allow_nan=True)
    if "\n" in text:
        raise ValueError("a JSONL record must be one line")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        data = (text + "\n").encode()
        if os.write(fd, data) != len(data):  # regular files take the whole buffer or raise
            raise OSError(f"short write to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str | Path) -> Iterator[str]:
    """The complete lines of a JSONL file (a torn final line is reported on stderr and skipped)."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1]:
        print(f"warning: {path}: ignoring a torn final line ({len(lines[-1])} bytes)", file=sys.stderr)
    for line in lines[:-1]:
        if line.strip():
            yield line.decode()

"""Reading role responses: the last fenced ```json block (or a bare JSON object) plus optional file blocks.

File blocks are fenced code whose info string names a file: ```cuda file=kernel.cuh ... ```. Names must be flat
(the contest packer does not recurse) and carry a source suffix the solution format allows.
"""
from __future__ import annotations

import json
import re

from ..errors import BadInputError
from ..solutions import SOURCE_SUFFIXES

JSON_BLOCK = re.compile(r"```json\s*\n(.*?)```", re.DOTALL)
FILE_BLOCK = re.compile(r"```[\w+.-]*[ \t]+file=([^\s`]+)[ \t]*\n(.*?)```", re.DOTALL)


def json_payload(text: str) -> dict:
    blocks = JSON_BLOCK.findall(text)
    candidates = list(reversed(blocks))
    if not candidates:
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            candidates = [text[start:end + 1]]
    for raw in candidates:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise BadInputError("response has no JSON object (expected a ```json block)")


def file_blocks(text: str) -> dict[str, str]:
    files = {}
    for name, body in FILE_BLOCK.findall(text):
        if "/" in name or "\\" in name or name.startswith(".") or not any(name.endswith(s) for s in SOURCE_SUFFIXES):
            raise BadInputError(f"file block {name!r}: solution sources are flat files with a source suffix")
        files[name] = body
    return files

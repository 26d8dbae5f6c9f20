"""The three contest definitions as this project's own JSON, loaded into flashinfer-bench `Definition` models.

Each `<name>.json` embeds its reference as source text; the same text lives beside it in `<name>.py` so it can be
read and edited as Python (`python -m sdk.definitions` re-embeds it; a test fails when the two drift apart).
With `FIB_DATASET_PATH` set to an official dataset, its `definitions/**/<name>.json` is used instead.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Callable

from ..errors import BadInputError, one_line
from .._fib import Definition

HERE = Path(__file__).parent
_MODULES: dict[str, ModuleType] = {}


def names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.json"))


def _dataset_file(name: str) -> Path | None:
    root = os.environ.get("FIB_DATASET_PATH")
    if not root:
        return None
    hits = sorted(Path(root, "definitions").rglob(f"{name}.json"))
    return hits[0] if hits else None


def parse(path: Path) -> Definition:
    """Read and validate one definition file; any defect becomes a one-line BadInputError."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{path}: not a readable JSON definition ({exc})") from None
    if not isinstance(raw, dict):
        raise BadInputError(f"{path}: a definition must be a JSON object")
    unknown = set(raw) - set(Definition.model_fields)
    if unknown:
        raise BadInputError(f"{path}: unknown definition field(s) {sorted(unknown)}")
    try:
        return Definition.model_validate(raw)
    except Exception as exc:  # pydantic.ValidationError, reference syntax errors
        raise BadInputError(f"{path}: invalid definition ({one_line(exc)})") from None


@functools.lru_cache(maxsize=None)
def load(name: str) -> Definition:
    if name not in names():
        raise BadInputError(f"unknown definition {name!r}; known: {', '.join(names())}")
    return parse(_dataset_file(name) or HERE / f"{name}.json")


def reference_source(name: str) -> str:
    return load(name).reference


@functools.lru_cache(maxsize=None)
def reference(name: str) -> Callable:
    """The definition's reference `run`, compiled from the definition's own source text."""
    module = ModuleType(f"fib_reference_{name}")
    exec(compile(reference_source(name), f"<reference {name}>", "exec"), module.__dict__)
    _MODULES[name] = module
    return module.run


def sync() -> list[str]:
    """Re-embed every `<name>.py` into its JSON; returns the names that changed."""
    changed = []
    for name in names():
        path = HERE / f"{name}.json"
        raw = json.loads(path.read_text())
        text = (HERE / f"{name}.py").read_text()
        if raw["reference"] != text:
            raw["reference"] = text
            path.write_text(json.dumps(raw, indent=2) + "\n")
            changed.append(name)
    load.cache_clear()
    reference.cache_clear()
    reference_module.cache_clear()
    return changed


@functools.lru_cache(maxsize=None)
def reference_module(name: str) -> ModuleType:
    """The module namespace of the reference (for helpers it defines, e.g. the indexer's K-cache dequant)."""
    reference(name)
    return _MODULES[name]

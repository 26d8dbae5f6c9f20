"""The three contest definitions as this project's own JSON, loaded into flashinfer-bench `Definition` models.

Each `<name>.json` embeds its reference as source text; the same text lives beside it in `<name>.py` so it can be
read and edited as Python (`python -m sdk.definitions` re-embeds it; a test fails when the two drift apart).
With an official dataset active (`FIB_DATASET_PATH`, `--definitions DIR`; see `sources`), its definition and its
reference are used instead; `reference_module` stays the SDK's own (the gate uses helpers only it defines).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Callable

from ..errors import BadInputError, one_line
from .._fib import Definition

HERE = Path(__file__).parent


def names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.json"))


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


def load(name: str) -> Definition:
    """The active definition of `name`: the dataset's when one is active and has it, else the SDK's."""
    from . import sources

    return sources.active(name).definition


def reference_source(name: str) -> str:
    return load(name).reference


def reference(name: str) -> Callable:
    """The active definition's reference `run`, compiled from that definition's own source text."""
    from . import sources

    return sources.reference_of(sources.active(name))


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
    from . import sources

    sources.clear_caches()
    return changed


def reference_module(name: str) -> ModuleType:
    """The SDK's own reference as a module (for helpers it defines, e.g. the indexer's K-cache dequant), whichever
    definition is active: an official reference need not define them."""
    from . import sources

    return sources.reference_module_of(sources.own(name))


from .sources import (  # noqa: E402,F401 - the public face of where definitions come from
    OFFICIAL, OWN, LoadedDefinition, Source, environment_definitions, load_definitions, reference_of, references,
)

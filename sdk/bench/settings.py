"""Bench settings per definition from a TOML file (`bench --settings FILE`; `nox -s repro` passes
repro/settings.toml), so that one definition's run is sized to the machine it runs on without a user having to know
the numbers:

    [indexer]          # applies to runs whose definitions all contain "indexer"
    warmup = 3
    iters = 20
    reference_iters = 6

Keys are BenchConfig fields (TUNABLE; `budget_ms = 0` switches the budget off, as `--budget-ms 0` does); the command
line wins over the file, the file over the defaults. A run over
several definitions that the file sizes differently is refused: run them one `--definition` at a time.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import BadInputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TUNABLE = ("trials", "warmup", "iters", "budget_ms", "min_iters", "checks", "reference_iters", "peer_draws",
           "timeout_s", "compile_budget_s", "peer_filter")  # peer_filter: what --peers takes, as a list of names' parts


def settings_for(path: Path, definitions: set[str]) -> dict:
    """The overrides of the file's tables whose key is in every one of `definitions` (merged; a clash refused)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"--settings {path}: cannot read ({exc})") from None
    merged: dict = {}
    for key, table in data.items():
        if not isinstance(table, dict):
            raise BadInputError(f"--settings {path}: [{key}] must be a table of bench settings")
        unknown = sorted(set(table) - set(TUNABLE))
        if unknown:
            raise BadInputError(f"--settings {path}: [{key}] has unknown setting(s) {', '.join(unknown)} "
                                f"(known: {', '.join(TUNABLE)})")
        matches = [d for d in definitions if key in d]
        if not matches:
            continue
        if len(matches) != len(definitions):
            raise BadInputError(f"--settings {path}: [{key}] sizes {', '.join(sorted(matches))} but this run also "
                                f"benches {', '.join(sorted(definitions - set(matches)))}: use --definition")
        for name, value in table.items():
            if name in merged and merged[name] != value:
                raise BadInputError(f"--settings {path}: two tables set {name} differently for this run")
            merged[name] = value
    return merged

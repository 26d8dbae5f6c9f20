"""The paper's claims (repro/paper.toml): what was reported, against which baseline, how aggregated, from where."""
from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from ..errors import BadInputError

CLAIM_KEYS = ("definition", "label", "metric", "value", "baseline", "hardware", "aggregation", "official", "source")
TOKEN_KEYS = ("definition", "value", "source")


def load_paper(path: Path) -> dict:
    """{"paper": {...}, "claims": [...], "tokens": {definition: entry}}; every claim must name its source and
    aggregation."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"{path}: not a readable paper TOML ({exc})") from None
    claims = raw.get("claims", [])
    for i, claim in enumerate(claims):
        missing = [k for k in CLAIM_KEYS if k not in claim]
        if missing:
            raise BadInputError(f"{path}: claim {i} lacks {missing}")
    tokens = {}
    for i, entry in enumerate(raw.get("tokens", [])):
        missing = [k for k in TOKEN_KEYS if k not in entry]
        if missing:
            raise BadInputError(f"{path}: tokens entry {i} lacks {missing}")
        tokens[entry["definition"]] = entry
    return {"paper": raw.get("paper", {}), "claims": claims, "tokens": tokens}

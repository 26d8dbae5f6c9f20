"""Role prompts: Jinja templates in `prompts/` (StrictUndefined: a missing variable is an error, not a blank)."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import jinja2

PROMPTS = Path(__file__).resolve().parent / "prompts"


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(PROMPTS)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False, trim_blocks=False)


def render(role: str, context: dict) -> tuple[str, dict]:
    """The prompt text and {name, sha256} of the template it came from (recorded in the ledger)."""
    name = f"{role}.md.j2"
    source = (PROMPTS / name).read_bytes()
    text = environment().get_template(name).render(**context)
    return text, {"name": name, "sha256": hashlib.sha256(source).hexdigest()[:16]}

"""Skills: compact markdown files under `skills/`, injected into role prompts on demand.

File format: the first line is a one-line description; then `key: value` lines up to the first blank line
(`version`, `governs` = the templates it covers, `roles`, `when` = a list of always | build_error | gate_failure |
plateau | timed); then the markdown body. A skill reaches a prompt when the role matches, it governs the
candidate's template (a template that no skill names gets the skills governing `templates/common`), and its
`when` condition holds, or when the planner asked for it by name.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInputError

SKILLS = Path(__file__).resolve().parents[2] / "skills"
ROLES = ("planner", "coder", "profiler", "evaluator", "researcher")
WHEN = ("always", "build_error", "gate_failure", "plateau", "timed")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    version: int
    governs: tuple[str, ...]
    roles: tuple[str, ...]
    when: tuple[str, ...]
    body: str
    sha256: str

    def applies(self, role: str, scope: str, events: set[str], requested: set[str]) -> bool:
        if self.name in requested:
            return True
        if role not in self.roles or scope not in self.governs:
            return False
        return "always" in self.when or bool(events & set(self.when))

    def ref(self) -> dict:
        return {"name": self.name, "version": self.version, "sha256": self.sha256[:16]}


def _split(items: str) -> tuple[str, ...]:
    return tuple(i.strip() for i in items.split(",") if i.strip())


def parse(path: Path) -> Skill:
    text = path.read_text()
    lines = text.splitlines()
    if not lines or not lines[0].strip() or lines[0].startswith(("#", "-")):
        raise BadInputError(f"{path}: the first line must be a one-line description")
    meta, index = {}, 1
    while index < len(lines) and lines[index].strip():
        key, sep, value = lines[index].partition(":")
        if not sep:
            raise BadInputError(f"{path}:{index + 1}: expected 'key: value' before the first blank line")
        meta[key.strip()] = value.strip()
        index += 1
    missing = {"version", "governs", "roles", "when"} - set(meta)
    if missing:
        raise BadInputError(f"{path}: missing {sorted(missing)}")
    roles, when = _split(meta["roles"]), _split(meta["when"])
    if not roles or not when or set(roles) - set(ROLES) or set(when) - set(WHEN):
        raise BadInputError(f"{path}: roles must be among {ROLES} and when among {WHEN}")
    return Skill(name=path.stem, description=lines[0].strip(), version=int(meta["version"]),
                 governs=_split(meta["governs"]), roles=roles, when=when,
                 body="\n".join(lines[index:]).strip() + "\n", sha256=hashlib.sha256(text.encode()).hexdigest())


def load(root: Path = SKILLS) -> list[Skill]:
    return [parse(p) for p in sorted(Path(root).glob("*.md")) if p.name != "README.md"]


def set_digest(skills: list[Skill]) -> str:
    """One hash for the whole skill set, recorded per run so a result names the exact skills it used."""
    digest = hashlib.sha256()
    for skill in sorted(skills, key=lambda s: s.name):
        digest.update(f"{skill.name}:{skill.sha256}\n".encode())
    return digest.hexdigest()


def select(skills: list[Skill], role: str, template: str, events: set[str] = frozenset(),
           requested: set[str] = frozenset()) -> list[Skill]:
    """Skills governing `templates/<template>`; a template no skill names gets the `templates/common` ones."""
    scope = f"templates/{template}"
    if not any(scope in s.governs for s in skills):
        scope = "templates/common"
    return [s for s in skills if s.applies(role, scope, set(events), set(requested))]

"""Re-render template-generated solutions and detect byte drift.

A rendered solution records `solutions/<dir>/render.toml`:

    template = "dsa_topk_indexer"
    [params]
    BLOCK_N = 64

`check_drift` re-renders every such solution from its recorded parameters into memory and compares each output
byte for byte with the committed file in the solution's source folder (`solution/<source_dir>/`). Files the
template does not produce (hand-written helpers) are not compared. An empty list means no drift.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import render
from .errors import BadInputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RENDER_TOML = "render.toml"
SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise BadInputError(f"cannot write {value!r} ({type(value).__name__}) as a render parameter")


def write_render_record(solution_dir: Path, template: str, params: dict) -> Path:
    lines = [f"template = {_toml_value(template)}", "", "[params]"]
    lines += [f"{key} = {_toml_value(params[key])}" for key in sorted(params)]
    path = Path(solution_dir) / RENDER_TOML
    path.write_text("\n".join(lines) + "\n")
    return path


def read_render_record(solution_dir: Path) -> tuple[str, dict]:
    path = Path(solution_dir) / RENDER_TOML
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read ({exc})") from None
    if not isinstance(data.get("template"), str) or not isinstance(data.get("params", {}), dict):
        raise BadInputError(f"{path}: needs template = \"<name>\" and a [params] table")
    return data["template"], dict(data.get("params", {}))


def source_dir(solution_dir: Path) -> Path:
    """Where the solution's flat sources live, per its config.toml ([build] source_dir, default the language)."""
    config = Path(solution_dir) / "config.toml"
    try:
        build = tomllib.loads(config.read_text()).get("build", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"{config}: cannot read ({exc})") from None
    return Path(solution_dir) / "solution" / build.get("source_dir", build.get("language", "python"))


def expected_files(solution_dir: Path, templates_root: Path = render.TEMPLATES) -> dict[Path, str]:
    template, params = read_render_record(solution_dir)
    folder = source_dir(solution_dir)
    return {folder / name: text for name, text in render.render_files(template, params, templates_root).items()}


def _first_difference(a: str, b: str) -> int:
    for number, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), 1):
        if x != y:
            return number
    return min(len(a.splitlines()), len(b.splitlines())) + 1


def check_drift(solutions_root: Path | None = None, templates_root: Path = render.TEMPLATES) -> list[str]:
    """One message per drifted, missing or unrenderable file; empty when every rendered solution matches."""
    root = Path(solutions_root) if solutions_root else SOLUTIONS
    problems = []
    for record in sorted(root.glob(f"*/{RENDER_TOML}")):
        try:
            expected = expected_files(record.parent, templates_root)
        except BadInputError as exc:
            problems.append(f"{record}: cannot re-render ({exc})")
            continue
        except Exception as exc:  # Jinja errors name the template line; keep them one line
            problems.append(f"{record}: cannot re-render ({type(exc).__name__}: {exc})")
            continue
        for path, text in sorted(expected.items()):
            if not path.exists():
                problems.append(f"{path}: missing (re-rendering {record} produces it)")
            elif path.read_bytes() != text.encode():
                problems.append(f"{path}: drifted from its template (first difference at line "
                                f"{_first_difference(path.read_text(errors='replace'), text)}); edit the template "
                                f"or the params in {record}, never the rendered file")
    return problems


def rendered_solutions(solutions_root: Path | None = None) -> list[Path]:
    root = Path(solutions_root) if solutions_root else SOLUTIONS
    return [p.parent for p in sorted(root.glob(f"*/{RENDER_TOML}"))]


def rewrite(solution_dir: Path, templates_root: Path = render.TEMPLATES) -> list[Path]:
    """Re-render a solution in place from its render.toml (after a deliberate template change)."""
    written = []
    for path, text in expected_files(solution_dir, templates_root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written

"""A candidate on disk as a contest package (`config.toml` + flat sources; written by `workspace.Workspace`), its
sources digest, and the promotion of the best one into a solutions folder."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ..regenerate import write_render_record
from ..solutions import load_package

AUTHOR = "fib-contest-sdk"


def config_toml(name: str, definition: str, entry_point: str, description: str) -> str:
    return (f'[solution]\nname = {json.dumps(name)}\ndefinition = {json.dumps(definition)}\n'
            f'author = "{AUTHOR}"\ndescription = {json.dumps(description)}\n\n'
            f'[build]\nlanguage = "python"\nentry_point = {json.dumps(entry_point)}\n'
            f'destination_passing_style = true\nbinding = "torch"\nsource_dir = "python"\n')


def sources_digest(files: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return digest.hexdigest()


def load_solution(package_dir: Path):
    return load_package(package_dir).solution


def promote(record: dict, package_dir: Path, dest_root: Path, dir_name: str, evidence: dict) -> Path:
    """Copy the candidate into `dest_root/dir_name` (config.toml, sources, render.toml when it is a pure
    template point, evidence.json); an earlier promotion there is replaced."""
    dest = Path(dest_root) / dir_name
    if (dest / "solution").exists():
        shutil.rmtree(dest / "solution")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(package_dir / "solution", dest / "solution")
    config = (package_dir / "config.toml").read_text()
    config = config.replace(f'name = {json.dumps(record["solution_name"])}', f"name = {json.dumps(dir_name)}", 1)
    (dest / "config.toml").write_text(config)
    if record.get("overlay_files"):
        (dest / "render.toml").unlink(missing_ok=True)  # hand-edited files: not reproducible from params alone
    else:
        write_render_record(dest, record["template"], record["params"])
    (dest / "evidence.json").write_text(json.dumps(evidence, indent=1, sort_keys=True) + "\n")
    return dest

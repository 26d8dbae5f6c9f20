"""A candidate's working copy: a contest package under `<run>/candidates/<id>/package/` that tools change.

It starts as its parent's final sources (or the template's default point when it has no parent). Tools render a
template point into it (`render`, which replaces every file) or apply unified diffs (`patch`, saved under
`patches/`). What the candidate is, for lineage, is its final sources (sha256), the last rendered template point
and the files that differ from that point (`changed_files`): a pure template point can be re-rendered byte for
byte (render.toml), an edited one is kept as sources plus its patches. Results of compile / gate / bench are
cached per sources digest, so the loop's final pipeline reuses what a tool already measured on the same bytes.
"""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

from .. import render
from . import candidate as cand
from . import patching


class Workspace:
    def __init__(self, folder: Path, *, candidate_id: str, definition: str, template: str, templates_root: Path,
                 parent: "Workspace | None" = None, parent_id: str | None = None):
        self.folder = Path(folder)
        self.id, self.definition, self.template = candidate_id, definition, template
        self.templates_root = Path(templates_root)
        self.parent_id = parent_id or (parent.id if parent else None)
        self.parent_files = parent.files() if parent else {}
        self.name = f"agent-{template}-{candidate_id}"
        self.spec = render.load_template(template, self.templates_root)
        self.params: dict = dict(parent.params) if parent else render.default_params(template, self.templates_root)
        self.patches: list[str] = []
        self.finished: str | None = None
        self.cache: dict = {}
        self.lock = threading.RLock()  # tools of one candidate run one at a time
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write(parent.files() if parent else render.render_files(template, self.params, self.templates_root))

    @property
    def package_dir(self) -> Path:
        return self.folder / "package"

    @property
    def source_dir(self) -> Path:
        return self.package_dir / "solution" / "python"

    def files(self) -> dict[str, str]:
        if not self.source_dir.is_dir():
            return {}
        return {p.name: p.read_text() for p in sorted(self.source_dir.iterdir()) if p.is_file()}

    def digest(self) -> str:
        return cand.sources_digest(self.files())

    def _write(self, files: dict[str, str]) -> None:
        if self.source_dir.exists():
            shutil.rmtree(self.source_dir)
        self.source_dir.mkdir(parents=True)
        for name, text in files.items():
            (self.source_dir / name).write_text(text)
        entry = self.spec.get("entry_point", "main.py::run")
        about = (f"agent candidate {self.id} from templates/{self.template} params "
                 f"{json.dumps(self.params, sort_keys=True)}" + (f" + {len(self.patches)} patch(es)"
                                                                 if self.patches else ""))
        (self.package_dir / "config.toml").write_text(cand.config_toml(self.name, self.definition, entry, about))

    def render(self, params: dict) -> dict[str, str]:
        """Replace every file with the rendered template point (raises BadInputError outside the space)."""
        files = render.render_files(self.template, params, self.templates_root)
        self.params = dict(params)
        self._write(files)
        return files

    def patch(self, diff: str) -> list[str]:
        """Apply a unified diff to the current files, all or nothing; returns one line per changed file."""
        files, report = patching.apply(self.files(), diff)
        self.patches.append(diff)
        folder = self.folder / "patches"
        folder.mkdir(exist_ok=True)
        (folder / f"{len(self.patches):03d}.diff").write_text(diff if diff.endswith("\n") else diff + "\n")
        self._write(files)
        return report

    def changed_files(self) -> list[str]:
        """Files that differ from the last rendered template point (added, edited or removed)."""
        try:
            point = render.render_files(self.template, self.params, self.templates_root)
        except Exception:  # a template that no longer renders these params: every file counts as changed
            point = {}
        files = self.files()
        return sorted(n for n in set(point) | set(files) if point.get(n) != files.get(n))

    def solution(self):
        return cand.load_solution(self.package_dir)

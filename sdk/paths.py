"""Where the SDK's default paths live: the project root, not the current folder.

The project root is, in order: `FIB_SDK_ROOT` when set; the nearest folder at or above the current one that holds a
`submission.toml`; the checkout this package was loaded from (the folder above `sdk/`, when it holds a
`submission.toml` or a `pyproject.toml`); else the current folder. Defaults such as `repro/evidence`,
`repro/results`, `dist/` and `submission.toml` are taken from there, so `fib-sdk submit` works from any folder of a
clone (and from outside it, for an editable install). A relative path that a user types is taken from the current
folder; an input path that does not exist there is also looked up under the project root.
"""
from __future__ import annotations

import os
from pathlib import Path

MARKER = "submission.toml"
CHECKOUT = Path(__file__).resolve().parent.parent


def project_root() -> Path:
    env = os.environ.get("FIB_SDK_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / MARKER).is_file():
            return folder
    if (CHECKOUT / MARKER).is_file() or (CHECKOUT / "pyproject.toml").is_file():
        return CHECKOUT
    return here


def under_root(relative: str | Path) -> Path:
    """`relative` under the project root (an absolute path is returned as it is)."""
    path = Path(relative)
    return path if path.is_absolute() else project_root() / path


def existing(path: str | Path) -> Path:
    """An input path as typed: from the current folder if it exists there, else from the project root if it exists
    there, else unchanged (the caller's own check then names it as typed)."""
    path = Path(path)
    if path.is_absolute() or path.exists():
        return path
    candidate = project_root() / path
    return candidate if candidate.exists() else path

"""Where each definition and its workloads come from: an official FlashInfer-Bench dataset on disk, or this SDK.

A dataset directory is read in either of the two layouts it is published in:

* flashinfer-trace: `definitions/<op_type>/<name>.json`, `workloads/<op_type>/<name>.jsonl`, `blob/...`
* flat (the contest's files): `definitions/<name>.json`, `workloads/<name>.jsonl`

The active dataset is `FIB_DATASET_PATH` (what `--definitions DIR` sets, so gate worker processes inherit it);
a definition it lacks falls back to the SDK's own files, and the result says so in `source`. Every results file
records, per definition, `environment_entry(...)`: which source, which file, and the file's sha256.
"""
from __future__ import annotations

import functools
import hashlib
import linecache
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Literal

from .._fib import Definition, Workload
from ..errors import BadInputError

Source = Literal["official", "fib-sdk"]
OFFICIAL, OWN = "official", "fib-sdk"
DATASET_ENV = "FIB_DATASET_PATH"
OWN_DEFINITIONS = Path(__file__).parent
OWN_WORKLOADS = OWN_DEFINITIONS.parent / "workloads"
REPO_ROOT = OWN_DEFINITIONS.parent.parent


@dataclass(frozen=True)
class LoadedDefinition:
    definition: Definition
    workloads: tuple[Workload, ...]
    source: Source
    path: Path                  # the definition JSON that was parsed
    sha256: str                 # of that file's bytes
    workloads_path: Path | None
    workloads_sha256: str | None

    @property
    def name(self) -> str:
        return self.definition.name


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _shown(path: Path | None) -> str | None:
    """Repository-relative for the SDK's own files (portable across checkouts), absolute for a dataset's."""
    if path is None:
        return None
    path = Path(path).resolve()
    try:
        return str(path.relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def environment_entry(loaded: LoadedDefinition) -> dict:
    """The `environment.definitions[<name>]` record of a results file."""
    return {"source": loaded.source, "path": _shown(loaded.path), "sha256": loaded.sha256,
            "workloads": {"path": _shown(loaded.workloads_path), "sha256": loaded.workloads_sha256}}


def environment_definitions(names: list[str] | None = None) -> dict[str, dict]:
    """`environment.definitions` for the given definitions (default: the SDK's three), as loaded right now."""
    from . import names as own_names

    return {name: environment_entry(active(name)) for name in sorted(names or own_names())}


# ---- finding files ---------------------------------------------------------------------------------------------

def dataset_root() -> Path | None:
    root = os.environ.get(DATASET_ENV)
    return Path(root) if root else None


def _one(root: Path, folder: str, filename: str) -> Path | None:
    """`root/folder/**/filename`; two hits is an ambiguous dataset (names are unique in a TraceSet)."""
    hits = sorted(Path(root, folder).rglob(filename))
    if len(hits) > 1:
        raise BadInputError(f"{root}: {filename} appears {len(hits)} times under {folder}/ "
                            f"({', '.join(str(h.relative_to(root)) for h in hits[:3])})")
    return hits[0] if hits else None


def dataset_names(root: Path) -> list[str]:
    return sorted({p.stem for p in Path(root, "definitions").rglob("*.json")})


def check_dataset(root: Path) -> Path:
    root = Path(root)
    if not Path(root, "definitions").is_dir():
        raise BadInputError(f"{root}: not a FlashInfer-Bench dataset (no definitions/ folder)")
    return root


# ---- loading ---------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _load(definition_path: Path, workloads_path: Path | None, source: str) -> LoadedDefinition:
    from . import parse
    from ..workloads import parse_jsonl

    definition = parse(definition_path)
    if definition.name != definition_path.stem:
        raise BadInputError(f"{definition_path}: defines {definition.name!r}, "
                            f"the file name says {definition_path.stem!r}")
    loads = tuple(parse_jsonl(workloads_path, definition.name)) if workloads_path else ()
    return LoadedDefinition(definition, loads, source, definition_path, sha256_of(definition_path), workloads_path,
                            sha256_of(workloads_path) if workloads_path else None)


def own(name: str) -> LoadedDefinition:
    path = OWN_DEFINITIONS / f"{name}.json"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in OWN_DEFINITIONS.glob("*.json")))
        raise BadInputError(f"unknown definition {name!r}; known: {known}")
    workloads = OWN_WORKLOADS / f"{name}.jsonl"
    return _load(path, workloads if workloads.exists() else None, OWN)


def official(name: str, root: Path | None = None) -> LoadedDefinition | None:
    """The dataset's definition (and workloads) of `name`, or None when the dataset has no such definition.

    A dataset definition without a workload file borrows the SDK's workload list (the same official uuids)."""
    root = root if root is not None else dataset_root()
    if root is None:
        return None
    path = _one(root, "definitions", f"{name}.json")  # a blobs-only dataset has none: the SDK's own then
    if path is None:
        return None
    workloads = _one(root, "workloads", f"{name}.jsonl")
    if workloads is None and (OWN_WORKLOADS / f"{name}.jsonl").exists():
        workloads = OWN_WORKLOADS / f"{name}.jsonl"
    return _load(path.resolve(), workloads.resolve() if workloads else None, OFFICIAL)


def active(name: str) -> LoadedDefinition:
    """What the gate and the bench use for `name`: the active dataset's, else the SDK's own (cached per dataset
    root, so changing FIB_DATASET_PATH takes effect at once)."""
    return _active(name, os.environ.get(DATASET_ENV) or None)


@functools.lru_cache(maxsize=None)
def _active(name: str, root: str | None) -> LoadedDefinition:
    return (official(name, Path(root)) if root else None) or own(name)


def load_definitions(root: Path | str | None = None, names: list[str] | None = None) -> dict[str, LoadedDefinition]:
    """Every definition of `root` (official) plus the SDK's own ones it lacks; without `root`, the SDK's own.

    `names` restricts the result (a name found nowhere raises)."""
    from . import names as own_names

    root = check_dataset(Path(root)) if root is not None else None
    found = dataset_names(root) if root is not None else []
    wanted = names or sorted(set(found) | set(own_names()))
    return {name: (official(name, root) if name in found else None) or own(name) for name in wanted}


# ---- references ------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _compile_reference(source_text: str, label: str) -> ModuleType:
    """The reference text as a module of its own, as FlashInfer-Bench builds it (a one-file Python solution whose
    `run` is called with the inputs); its lines are registered so tracebacks show them."""
    filename = f"<reference {label}>"
    linecache.cache[filename] = (len(source_text), None, source_text.splitlines(True), filename)
    module = ModuleType(f"fib_reference_{label.replace(' ', '_').replace(':', '_')}")
    module.__file__ = filename
    exec(compile(source_text, filename, "exec"), module.__dict__)
    if not callable(getattr(module, "run", None)):
        raise BadInputError(f"{filename}: the reference defines no callable `run`")
    return module


def reference_module_of(loaded: LoadedDefinition) -> ModuleType:
    return _compile_reference(loaded.definition.reference, f"{loaded.source}:{loaded.name}:{loaded.sha256[:12]}")


def reference_of(loaded: LoadedDefinition) -> Callable:
    """The `run` of a loaded definition's embedded reference source (keyword or positional inputs)."""
    return reference_module_of(loaded).run


def references(name: str) -> dict[str, Callable]:
    """Both references of `name`, to time side by side: {"fib-sdk": ours, "official": the dataset's} (the latter only
    while a dataset with that definition is active)."""
    out = {OWN: reference_of(own(name))}
    if (theirs := official(name)) is not None:
        out[OFFICIAL] = reference_of(theirs)
    return out


def use_dataset(root: Path | str | None) -> None:
    """Make `root` the active dataset (None: the SDK's own files) for this process and the workers it starts."""
    if root is None:
        os.environ.pop(DATASET_ENV, None)
    else:
        os.environ[DATASET_ENV] = str(check_dataset(Path(root)).resolve())
    clear_caches()


def clear_caches() -> None:
    """Forget parsed files and compiled references (after the files changed on disk)."""
    for fn in (_load, _active, _compile_reference):
        fn.cache_clear()

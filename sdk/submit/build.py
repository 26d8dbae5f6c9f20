"""Assemble `dist/submission/` (the contest repository layout) and `dist/submission.tar.gz` from gated solutions.

Everything is checked before anything is written: the rules, the evidence, the results rows. The tree is built in
a staging folder beside it and swapped in whole, so a refusal never leaves a half-written submission behind; and a
refusal removes the previous submission (folder, archive, checksum) of that output folder, so that nothing there is
taken for a current one. Only `submission/`, `submission.tar.gz` and `submission.tar.gz.sha256` inside the output
folder are ever written or removed, and only when they are absent or were written by this command.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .. import definitions
from .._fib import Solution
from ..errors import BadInputError
from ..paths import existing, under_root
from ..solutions import SolutionPackage, check_entry, load_package
from . import archive, evidence as ev, ledger, results, rules

INDEX = "SUBMISSION.md"  # also marks a folder as ours, so a rebuild may replace it
NAME = "submission"  # <out>/submission/, <out>/submission.tar.gz, <out>/submission.tar.gz.sha256
PACKED = "packed_solution.json"
SUBMISSION_TOML = "submission.toml"
PROVENANCE_FILES = ("render.toml",)  # copied beside config.toml when present (how a template rendered the sources)


@dataclass(frozen=True)
class Kernel:
    package: SolutionPackage
    evidence: ev.Evidence
    results: dict
    ledger: dict

    @property
    def folder(self) -> str:
        return self.package.root.name


@dataclass(frozen=True)
class Submission:
    folder: Path
    archive: Path
    sha256: str
    kernels: list[Kernel]


def submission_dirs(path: Path | None = None) -> list[Path]:
    """The kernels to submit as `submission.toml` (at the project root by default) lists them, `[submit]
    solutions = [...]`, each relative to the file's folder."""
    path = Path(path) if path else under_root(SUBMISSION_TOML)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise BadInputError(f"no SOLUTION_DIRS given and no {path} (a [submit] solutions = [...] list): name the "
                            "folders to submit") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"{path}: malformed TOML ({exc})") from None
    listed = (raw.get("submit") or {}).get("solutions") if isinstance(raw.get("submit"), dict) else None
    if not isinstance(listed, list) or not listed or not all(isinstance(d, str) and d for d in listed):
        raise BadInputError(f"{path}: needs [submit] solutions = [\"solutions/<dir>\", ...] (one per definition)")
    return [path.parent / d for d in listed]


def load_packages(solution_dirs: list[Path]) -> list[SolutionPackage]:
    """The packages of `solution_dirs`, or of submission.toml's list when none are given."""
    packages = [load_package(existing(d)) for d in solution_dirs or submission_dirs()]
    if not packages:
        raise BadInputError("no solution packages to submit")
    authors = sorted({p.solution.author for p in packages})
    if len(authors) > 1:
        raise BadInputError(f"solutions by different authors ({', '.join(authors)}) in one submission: the contest "
                            "scores by author, so keep one author string")
    for key, what in ((lambda p: p.root.name, "folder name"), (lambda p: p.solution.definition, "definition"),
                      (lambda p: p.name, "solution name")):
        values = [key(p) for p in packages]
        dup = next((v for v in values if values.count(v) > 1), None)
        if dup:
            folders = ", ".join(str(p.root) for p in packages if key(p) == dup)
            raise BadInputError(f"{folders} share the {what} {dup!r}: the contest evaluates one solution per "
                                "definition, each in its own folder; name the folders to submit")
    return packages


def check(packages: list[SolutionPackage], evidence_root: Path, results_files: list[Path]) -> list[Kernel]:
    kernels = []
    for package in packages:
        rules.enforce(package)
        check_entry(package, definitions.load(package.solution.definition))
        evidence = ev.load_evidence(package, evidence_root)
        rows = results.results_document(package, evidence.manifest, results_files)
        kernels.append(Kernel(package, evidence, rows, ledger.summarize(ledger.package_ledger(package))))
    return kernels


def _json(data) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


def _put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def solution_json(package: SolutionPackage) -> bytes:
    """The packed Solution, as the contest's packer makes it from config.toml and the flat sources."""
    data = (package.solution.model_dump_json(indent=2) + "\n").encode()
    reloaded = Solution.model_validate_json(data)
    if reloaded.hash() != package.solution.hash():
        raise BadInputError(f"{package.name}: solution.json does not round-trip through flashinfer-bench's Solution")
    return data


def write_kernel(kernel: Kernel, dest: Path) -> None:
    package, manifest = kernel.package, kernel.evidence.manifest
    _put(dest / "config.toml", (package.root / "config.toml").read_bytes())
    for name in PROVENANCE_FILES:
        if (package.root / name).is_file():
            _put(dest / name, (package.root / name).read_bytes())
    source_dest = dest / package.source_dir.relative_to(package.root)
    for path, data in ev.source_bytes(package).items():
        _put(source_dest / path, data)
        if ev.sha256((source_dest / path).read_bytes()) != manifest["source_sha256"][path]:
            raise BadInputError(f"{package.name}: {path} was not copied byte for byte")
    _put(dest / "solution.json", solution_json(package))
    ledger_path = ledger.package_ledger(package)
    _put(dest / ledger.LEDGER, ledger_path.read_bytes() if ledger_path else b"")
    _put(dest / "LEDGER.md", ledger.render(package.name, kernel.ledger).encode())
    _put(dest / "evidence" / ev.TRACES, kernel.evidence.traces_raw)
    _put(dest / "evidence" / ev.MANIFEST, kernel.evidence.manifest_raw)
    _put(dest / results.RESULTS, _json(kernel.results))


def index(kernels: list[Kernel]) -> str:
    lines = ["# Submission", "",
             "One folder per kernel, each with its own `config.toml` and flat sources under `solution/`; no root "
             "`config.toml` (the contest packs each immediate subfolder as one solution).", ""]
    if len(kernels) == 1:
        lines += [f"`{PACKED}` is the packed solution of `{kernels[0].folder}/`; the contest uses it as-is.", ""]
    else:
        lines += [f"No root `{PACKED}`: that file holds a single solution and is used as-is, so it would stand in "
                  "for all kernels of this repository. Each kernel folder carries its packed `solution.json` "
                  "instead, for reference.", ""]
    lines += ["| folder | solution | definition | gate | gate GPU | model calls | tokens in/out | cost (USD) |",
              "|---|---|---|---|---|---|---|---|"]
    for k in kernels:
        m, t = k.evidence.manifest, k.ledger["total"]
        lines.append(f"| `{k.folder}/` | {k.package.name} | {k.package.solution.definition} | "
                     f"{m['passed']}/{m['total']} PASSED | {(m.get('environment') or {}).get('gpu') or '-'} | "
                     f"{t['calls']} | {t['input_tokens']}/{t['output_tokens']} | {t['cost_usd']:.6f}"
                     + (f" (+{t['unpriced_calls']} unpriced calls)" if t["unpriced_calls"] else "") + " |")
    lines += ["", "Per kernel: `evidence/` holds the gate's flashinfer-bench traces (one per official workload) and "
              "its environment manifest; `results.json` the benchmark rows; `LEDGER.md` and `ledger.jsonl` what "
              "making the kernel cost. Only `config.toml` and `solution/` are read by the contest."]
    for k in kernels:
        for note in k.evidence.notes:
            lines.append(f"\nNote on {k.package.name}: {note}.")
    return "\n".join(lines) + "\n"


def outputs(out_dir: Path) -> tuple[Path, Path, Path]:
    """The submission folder, the archive and its checksum inside `out_dir`."""
    folder = Path(out_dir) / NAME
    tar = folder.with_name(NAME + ".tar.gz")
    return folder, tar, Path(f"{tar}.sha256")


def _ours(out_dir: Path) -> dict[Path, bool]:
    """For each existing output in `out_dir`: whether this command wrote it (a folder with SUBMISSION.md, or an
    empty one; an archive whose .sha256 beside it matches its bytes; a .sha256 naming submission.tar.gz)."""
    folder, tar, sha = outputs(out_dir)
    found = {}
    if folder.exists() or folder.is_symlink():
        found[folder] = folder.is_dir() and not folder.is_symlink() and (
            not any(folder.iterdir()) or (folder / INDEX).is_file())
    recorded = sha.read_text(errors="replace").split() if sha.is_file() and not sha.is_symlink() else []
    if tar.exists() or tar.is_symlink():
        found[tar] = (tar.is_file() and not tar.is_symlink() and len(recorded) == 2
                      and recorded == [hashlib.sha256(tar.read_bytes()).hexdigest(), tar.name])
    if sha.exists() or sha.is_symlink():
        found[sha] = len(recorded) == 2 and recorded[1] == tar.name
    return found


def _writable(out_dir: Path) -> None:
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise BadInputError(f"--out {out_dir}: not a folder")
    foreign = [path for path, ours in _ours(out_dir).items() if not ours]
    if foreign:
        raise BadInputError(f"refusing to replace {foreign[0]}: it was not written by `fib-sdk submit` (choose "
                            "another --out folder, or move it away)")


def remove_previous(out_dir: Path) -> list[Path]:
    """Remove the submission this command wrote earlier into `out_dir` (never anything else); returns what went."""
    removed = []
    for path, ours in _ours(out_dir).items():
        if ours:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append(path)
    return removed


def refused(exc: BadInputError, out_dir: Path) -> BadInputError:
    """The refusal, after removing the previous submission of `out_dir`, with a note of what was removed."""
    removed = remove_previous(out_dir)
    note = f"; removed the previous {', '.join(map(str, removed))} (no longer current)" if removed else ""
    return BadInputError(f"{exc}{note}")


def _replace(staging: Path, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)  # checked by _writable: a folder this command wrote
    staging.rename(out)


def build_submission(solution_dirs: list[Path], out_dir: Path | None = None, evidence_root: Path | None = None,
                     results_files: list[Path] | None = None,
                     log: Callable[[str], None] = lambda line: None) -> Submission:
    """Check the packages in `solution_dirs` (default: submission.toml's), then write `out_dir`/submission/,
    `out_dir`/submission.tar.gz and its .sha256 (default `out_dir`: dist/ under the project root). A refusal of a
    package (entry point, rules, evidence, results) removes the previous submission in `out_dir`."""
    out_dir = Path(out_dir) if out_dir is not None else under_root("dist")
    evidence_root = Path(evidence_root) if evidence_root is not None else under_root("repro/evidence")
    _writable(out_dir)
    packages = load_packages([Path(d) for d in solution_dirs])
    try:
        kernels = check(packages, Path(evidence_root), [Path(p) for p in results_files or []])
    except BadInputError as exc:
        raise refused(exc, out_dir) from None
    out, tar, _ = outputs(out_dir)
    staging = out.with_name(f".{NAME}.staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        for kernel in kernels:
            write_kernel(kernel, staging / kernel.folder)
            log(f"{kernel.package.name}: {kernel.evidence.manifest['passed']}/{kernel.evidence.manifest['total']} "
                f"workloads PASSED, {len(kernel.results['rows'])} results rows, "
                f"{kernel.ledger['total']['calls']} model calls")
        if len(kernels) == 1:
            _put(staging / PACKED, solution_json(kernels[0].package))
        _put(staging / INDEX, index(kernels).encode())
        _replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    digest = archive.write_archive(out, tar)
    return Submission(out, tar, digest, kernels)

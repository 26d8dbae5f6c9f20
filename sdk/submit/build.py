"""Assemble `dist/submission/` (the contest repository layout) and `dist/submission.tar.gz` from gated solutions.

Everything is checked before anything is written: the rules, the evidence, the results rows. The tree is built in
a sibling staging folder and swapped in whole, so a refusal never leaves a half-written submission behind.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .._fib import Solution
from ..errors import BadInputError
from ..solutions import SolutionPackage, discover, load_package
from . import archive, evidence as ev, ledger, results, rules

INDEX = "SUBMISSION.md"  # also marks a folder as ours, so a rebuild may replace it
PACKED = "packed_solution.json"
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


def load_packages(solution_dirs: list[Path]) -> list[SolutionPackage]:
    packages = [load_package(d) for d in solution_dirs] if solution_dirs else discover()
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


def _replace(staging: Path, out: Path) -> None:
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / INDEX).is_file()):
            raise BadInputError(f"refusing to replace {out}: it is not a submission folder written by this command")
        shutil.rmtree(out)
    staging.rename(out)


def build_submission(solution_dirs: list[Path], out: Path = Path("dist/submission"),
                     evidence_root: Path = Path("repro/evidence"), results_files: list[Path] | None = None,
                     log: Callable[[str], None] = lambda line: None) -> Submission:
    packages = load_packages([Path(d) for d in solution_dirs])
    kernels = check(packages, Path(evidence_root), [Path(p) for p in results_files or []])
    out = Path(out)
    if out.name in ("", ".", "..") or out.resolve() == Path.cwd().resolve():
        raise BadInputError(f"--out {out}: name a folder of its own (e.g. dist/submission)")
    staging = out.with_name(f".{out.name}.staging")
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
    tar = out.with_name(out.name + ".tar.gz")
    digest = archive.write_archive(out, tar)
    return Submission(out, tar, digest, kernels)

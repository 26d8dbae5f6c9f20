"""The benchmark results rows (schema "fib-sdk.results/1") that belong to a solution being packaged.

Which file: the ones passed with --results; else the file the gate evidence names (`results_file`); else the
newest `repro/results/*.json` (under the project root, see `sdk.paths`) with rows of the solution. A relative path
that the evidence names is taken from the working directory, else from the project root. The rows are copied as they are, in a file of the same schema, so
`fib-sdk report <kernel>/results.json` renders them.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import BadInputError
from ..paths import existing, under_root
from ..report.results import SCHEMA, load_results
from ..solutions import SolutionPackage

DEFAULT_DIR = Path("repro/results")
RESULTS = "results.json"


def _rows_of(package: SolutionPackage, rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["solution"] == package.name and r["definition"] == package.solution.definition]


def files_with(package: SolutionPackage, paths) -> list[Path]:
    """Those of `paths` that are readable results files with rows of `package`."""
    found = []
    for path in paths:
        try:
            if _rows_of(package, load_results([Path(path)]).rows):
                found.append(Path(path))
        except BadInputError:
            continue
    return found


def newest_with(package: SolutionPackage, folder: Path | None = None) -> Path | None:
    """The most recently written results file in `folder` (default repro/results/ under the project root) with
    rows of `package`."""
    folder = Path(folder) if folder is not None else under_root(DEFAULT_DIR)
    found = files_with(package, folder.glob("*.json") if folder.is_dir() else [])
    return max(found, key=lambda p: (p.stat().st_mtime, p.name)) if found else None


def choose_files(package: SolutionPackage, manifest: dict, explicit: list[Path]) -> list[Path]:
    if explicit:
        return list(explicit)
    named = manifest.get("results_file")
    if named:
        if not existing(named).is_file():
            raise BadInputError(f"{package.name}: the gate evidence names results file {named}, which is missing "
                                "(restore it or pass --results)")
        return [existing(named)]
    newest = newest_with(package)
    return [newest] if newest else []


def results_document(package: SolutionPackage, manifest: dict, explicit: list[Path]) -> dict:
    """{schema, sources: [{file, sha256, environment}], environment, rows} for `package`; rows may be empty when
    no results file names it (then `note` says so). Refuses a results row that is not PASSED, and one workload
    reported by two files."""
    files = choose_files(package, manifest, explicit)
    sources, rows, seen = [], [], {}
    for path in files:
        loaded = load_results([path])
        mine = _rows_of(package, loaded.rows)
        for row in mine:
            if row["workload"] in seen:
                raise BadInputError(f"{package.name}: workload {row['workload'][:8]} is in both {seen[row['workload']]}"
                                    f" and {path.name}; pass one results file per solution")
            seen[row["workload"]] = path.name
        if mine:
            info = loaded.files[0]
            sources.append({"file": info.name, "sha256": info.sha256, "environment": info.environment})
            rows += mine
    if not rows:
        if files and not explicit:
            raise BadInputError(f"{package.name}: the results file {files[0]} named by its gate evidence has no rows "
                                "of this solution")
        return {"schema": SCHEMA, "sources": [], "environment": {}, "rows": [],
                "note": f"no results file has rows of {package.name}: only the gate evidence backs it"}
    failed = [r for r in rows if r["status"] != "PASSED"]
    if failed:
        raise BadInputError(f"{package.name}: results file {seen[failed[0]['workload']]} reports workload "
                            f"{failed[0]['workload'][:8]} as {failed[0]['status']}"
                            f"{f' (+{len(failed) - 1} more)' if len(failed) > 1 else ''}; evidence and results "
                            "disagree: re-run the bench on these sources or pass --results")
    rows.sort(key=lambda r: r["workload"])
    return {"schema": SCHEMA, "sources": sources, "environment": sources[0]["environment"], "rows": rows}

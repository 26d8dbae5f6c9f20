"""Gate evidence: what the gate saw, committed so a CPU machine can package without re-running it.

Layout, one folder per solution name under the evidence root (`repro/evidence/` by default):
  <name>/traces.jsonl   one flashinfer-bench Trace per official workload, as the gate wrote them
  <name>/manifest.json  {"solution", "definition", "solution_hash" (Solution.hash()), "source_sha256" ({path:
                        sha256}), "spec" (the BuildSpec), "flashinfer_bench" (version that computed the hash),
                        "environment" ({gpu, driver, torch, cuda, commit, seed, trials, ...}), "results_file",
                        "passed", "total"}

`write_evidence` produces it from gate results; `load_evidence` accepts it only when it matches the sources on disk
and shows every official workload PASSED, and otherwise raises BadInputError with one line that says why.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Iterable

from .. import workloads as wl
from .._fib import Trace
from ..errors import BadInputError
from ..solutions import SolutionPackage

TRACES, MANIFEST = "traces.jsonl", "manifest.json"
REQUIRED_KEYS = ("solution", "definition", "solution_hash", "source_sha256", "environment", "passed", "total")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fib_version() -> str | None:
    try:
        return version("flashinfer-bench")
    except PackageNotFoundError:
        return None


def source_bytes(package: SolutionPackage) -> dict[str, bytes]:
    """The solution's sources exactly as they lie on disk, keyed by their path in the Solution.

    The Solution holds text read with universal newlines; a file whose bytes differ from that text (CRLF endings)
    would be packed differently by the contest than it was gated here, so it is refused."""
    out = {}
    for source in package.solution.sources:
        data = (package.source_dir / source.path).read_bytes()
        if data != source.content.encode():
            raise BadInputError(f"{package.name}: {source.path} has CR line endings; the contest packer would change "
                                "its bytes (convert it to LF)")
        out[source.path] = data
    return out


def source_digests(package: SolutionPackage) -> dict[str, str]:
    return {path: sha256(data) for path, data in sorted(source_bytes(package).items())}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False, default=str) + "\n").encode()


def _portable(path: str | Path | None) -> str | None:
    """A results file as the manifest records it: relative to the project root when it lies under it, so that the
    committed evidence names the same file on every clone."""
    if not path:
        return None
    from ..paths import project_root

    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(project_root()).as_posix()
    except ValueError:
        return Path(path).as_posix()


def write_evidence(package: SolutionPackage, gate_results: Iterable, env: dict, results_file: str | Path | None,
                   out_root: str | Path) -> Path:
    """Write `<out_root>/<solution name>/{traces.jsonl, manifest.json}` from gate results (objects with
    .workload, .status, .trace); returns the folder. Failures are recorded as they are: packaging refuses them."""
    gate_results = list(gate_results)
    solution = package.solution
    folder = Path(out_root) / solution.name
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / TRACES, "".join(r.trace.model_dump_json() + "\n" for r in gate_results).encode())
    manifest = {
        "solution": solution.name, "definition": solution.definition, "solution_hash": solution.hash(),
        "source_sha256": source_digests(package), "spec": solution.spec.model_dump(mode="json"),
        "flashinfer_bench": fib_version(), "environment": dict(env),
        "results_file": _portable(results_file),
        "passed": sum(r.status == "PASSED" for r in gate_results), "total": len(gate_results),
    }
    _write_atomic(folder / MANIFEST, manifest_bytes(manifest))  # written last: a manifest means the run finished
    return folder


@dataclass(frozen=True)
class Evidence:
    folder: Path
    manifest: dict
    manifest_raw: bytes   # copied into the submission byte for byte
    traces: list[Trace]
    traces_raw: bytes
    notes: tuple[str, ...]  # facts worth stating in the submission (e.g. a hash from another fib version)


def _read(path: Path, name: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BadInputError(f"{name}: no gate evidence ({path} is missing); run `fib-sdk submit --gate` on a GPU "
                            "and commit the evidence folder") from None


def _short(uuids: Iterable[str], limit: int = 4) -> str:
    uuids = list(uuids)
    more = f" and {len(uuids) - limit} more" if len(uuids) > limit else ""
    return ", ".join(u[:8] for u in uuids[:limit]) + more


def _check_sources(package: SolutionPackage, manifest: dict) -> list[str]:
    """Refuses evidence made for other sources; returns notes."""
    name, solution = package.name, package.solution
    recorded, ours = manifest["source_sha256"], source_digests(package)
    if not isinstance(recorded, dict):
        raise BadInputError(f"{name}: evidence manifest source_sha256 must map file paths to sha256")
    changed = sorted(p for p in set(recorded) | set(ours) if recorded.get(p) != ours.get(p))
    if changed:
        raise BadInputError(f"{name}: gate evidence was made for other sources ({', '.join(changed)} differ); "
                            "re-run the gate on these sources")
    spec = solution.spec.model_dump(mode="json")
    if "spec" in manifest and manifest["spec"] != spec:  # Solution.hash() leaves some fields out (e.g. DPS)
        fields = sorted(k for k in set(spec) | set(manifest["spec"]) if spec.get(k) != manifest["spec"].get(k))
        raise BadInputError(f"{name}: gate evidence was made for another solution (the build spec differs in "
                            f"{', '.join(fields)}); re-run the gate")
    if manifest["solution_hash"] == solution.hash():
        return []
    if "spec" in manifest and manifest.get("flashinfer_bench") not in (None, fib_version()):
        # Sources, spec, name and definition are equal: only the hash function changed (main drops the name).
        return [f"solution_hash {manifest['solution_hash'][:12]} was computed by flashinfer-bench "
                f"{manifest['flashinfer_bench']}; sources and build spec match byte for byte"]
    raise BadInputError(f"{name}: gate evidence was made for another solution (hash {manifest['solution_hash'][:12]}"
                        f", these sources hash to {solution.hash()[:12]}); re-run the gate")


def _parse_traces(path: Path, raw: bytes, name: str) -> list[Trace]:
    if raw and not raw.endswith(b"\n"):
        raise BadInputError(f"{path}: the last line is torn (the gate was interrupted); re-run the gate")
    traces = []
    for number, line in enumerate(raw.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            traces.append(Trace.model_validate_json(line))
        except Exception as exc:
            first = str(exc).strip().splitlines()
            raise BadInputError(f"{path}:{number}: not a flashinfer-bench Trace ({' '.join(first[:3])})") from None
    if not traces:
        raise BadInputError(f"{name}: {path} holds no traces")
    return traces


def _strict_passed(trace: Trace) -> bool:
    """The strict verdict the gate recorded beside the contest status (absent in traces of older gates)."""
    correctness = trace.evaluation.correctness if trace.evaluation else None
    strict = (correctness.extra or {}).get("strict") if correctness is not None else None
    return isinstance(strict, dict) and strict.get("passed") is True


def _check_traces(package: SolutionPackage, traces: list[Trace], manifest: dict) -> None:
    name, definition = package.name, package.solution.definition
    official = {w.uuid: w for w in wl.load(definition)}
    seen: dict[str, Trace] = {}
    for trace in traces:
        uuid = trace.workload.uuid
        if trace.solution != name or trace.definition != definition:
            raise BadInputError(f"{name}: evidence trace for workload {uuid[:8]} is of {trace.solution!r} on "
                                f"{trace.definition!r}")
        if uuid in seen:
            raise BadInputError(f"{name}: evidence lists workload {uuid[:8]} twice; keep one gate run per folder")
        seen[uuid] = trace
    failed = [f"{u[:8]} {t.evaluation.status.value if t.evaluation else 'no evaluation'}"
              for u, t in seen.items() if t.evaluation is None or t.evaluation.status.value != "PASSED"]
    if failed:
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        raise BadInputError(f"{name}: gate evidence has {len(failed)} non-PASSED workload(s) ({', '.join(failed[:3])}"
                            f"{more}); the contest zeroes a kernel with any failing workload")
    not_strict = [u[:8] for u, t in seen.items() if not _strict_passed(t)]
    if not_strict:
        raise BadInputError(f"{name}: gate evidence is not strict-clean on {len(not_strict)} workload(s) "
                            f"({', '.join(not_strict[:3])}); re-gate with this SDK's gate (strict verdict)")
    unknown = [u for u in seen if u not in official]
    if unknown:
        raise BadInputError(f"{name}: evidence has workloads that are not official for {definition} "
                            f"({_short(unknown)})")
    missing = [u for u in official if u not in seen]
    if missing:
        raise BadInputError(f"{name}: gate evidence covers {len(seen)} of {len(official)} official workloads of "
                            f"{definition} (missing {_short(missing)})")
    for uuid, trace in seen.items():
        if dict(trace.workload.axes) != dict(official[uuid].axes):
            raise BadInputError(f"{name}: evidence workload {uuid[:8]} has axes {dict(trace.workload.axes)}, "
                                f"officially {dict(official[uuid].axes)}")
    if (manifest["passed"], manifest["total"]) != (len(seen), len(seen)):
        raise BadInputError(f"{name}: evidence manifest says {manifest['passed']}/{manifest['total']} passed but "
                            f"its traces show {len(seen)}/{len(seen)}")


def load_evidence(package: SolutionPackage, evidence_root: str | Path) -> Evidence:
    """The committed gate evidence of `package`, verified against its sources and the official workload list."""
    name, solution = package.name, package.solution
    folder = Path(evidence_root) / name
    manifest_raw = _read(folder / MANIFEST, name)
    traces_raw = _read(folder / TRACES, name)
    try:
        manifest = json.loads(manifest_raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{folder / MANIFEST}: not JSON ({exc})") from None
    missing = [k for k in REQUIRED_KEYS if not isinstance(manifest, dict) or k not in manifest]
    if missing:
        raise BadInputError(f"{folder / MANIFEST}: lacks {missing}")
    if (manifest["solution"], manifest["definition"]) != (name, solution.definition):
        raise BadInputError(f"{name}: evidence in {folder} is for {manifest['solution']!r} on "
                            f"{manifest['definition']!r}, not {name!r} on {solution.definition!r}")
    notes = _check_sources(package, manifest)
    traces = _parse_traces(folder / TRACES, traces_raw, name)
    _check_traces(package, traces, manifest)
    return Evidence(folder, manifest, manifest_raw, traces, traces_raw, tuple(notes))


@dataclass(frozen=True)
class _TracedResult:
    workload: object
    status: str
    trace: Trace


def evidence_from_run(package: SolutionPackage, traces_path: str | Path, results_file: str | Path,
                      out_root: str | Path) -> Path:
    """Evidence from a bench run's trace file and results file (e.g. fetched from the GPU machine).

    Refuses when the results were made for other sources than the package has now (solution hash per row)."""
    import json

    from ..jsonl import read

    results = json.loads(Path(results_file).read_text())
    rows = [r for r in results["rows"] if r["solution"] == package.name]
    if not rows:
        raise BadInputError(f"{results_file}: no rows for {package.name}")
    hashes = {r.get("solution_hash") for r in rows}
    if hashes != {package.solution.hash()}:
        raise BadInputError(f"{results_file}: {package.name} was benchmarked with sources {sorted(map(str, hashes))}, "
                            f"the package now hashes to {package.solution.hash()}")
    traces = [Trace.model_validate_json(line) for line in read(traces_path)]
    traces = [t for t in traces if t.solution == package.name]
    env = {**results["environment"], "trials": results["environment"].get("trials")}
    gate_results = [_TracedResult(t.workload, t.evaluation.status.value, t) for t in traces]
    return write_evidence(package, gate_results, env, results_file, out_root)

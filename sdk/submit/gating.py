"""`submit --gate` on a GPU: gate each solution on every official workload and record the evidence.

Contest settings: 3 trials, a seed drawn from the OS (recorded in the evidence), the contest tolerance. Traces stream to
`<evidence>/<name>/traces.partial.jsonl` while the gate runs (so an interrupted run shows how far it got); the
complete evidence is written at the end with `write_evidence`, and the partial file removed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import workloads as wl
from ..solutions import SolutionPackage
from .evidence import write_evidence
from .results import files_with, newest_with

TRIALS = 3


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def gate_environment(trials: int, seed: int) -> dict:
    from ..bench.runner import environment

    env = environment("cuda", seed, "none (gate only)")
    env["trials"] = trials
    return env


def gate_and_record(package: SolutionPackage, evidence_root: Path, results_files: list[Path],
                    log: Callable[[str], None] = print) -> Path:
    from ..gate import contest_tolerance, draw_seed, gate_solution

    seed = draw_seed()
    definition = package.solution.definition
    partial = Path(evidence_root) / package.name / "traces.partial.jsonl"
    partial.unlink(missing_ok=True)
    results = gate_solution(package.solution, definition, wl.load(definition), trials=TRIALS, seed=seed,
                            tol=contest_tolerance(definition), trace_path=partial,
                            progress=lambda i, n, r: log(f"[{package.name} {i}/{n}] {r.workload.uuid[:8]} {r.status}"
                                                         + (f": {r.reason}" if r.reason else "")))
    results_file = next(iter(files_with(package, results_files)), None) or newest_with(package)
    folder = write_evidence(package, results, gate_environment(TRIALS, seed), results_file, evidence_root)
    partial.unlink(missing_ok=True)
    return folder

"""`fib-sdk submit [SOLUTION_DIRS...]`: write dist/submission/ and dist/submission.tar.gz from gated solutions.

Errors are BadInputError: `fib-sdk`'s group prints them as one `error: ...` line with exit status 3.
"""
from __future__ import annotations

from pathlib import Path

import click


@click.command("submit")
@click.argument("solution_dirs", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              show_default="dist/ under the project root",
              help="Output folder: submission/, submission.tar.gz and its .sha256 are written inside it, and nothing "
                   "else.")
@click.option("--gate", is_flag=True,
              help="On a GPU, gate every official workload first and rewrite the evidence; without a GPU, "
                   "package from the committed evidence.")
@click.option("--evidence", "evidence_root", default=None, type=click.Path(file_okay=False, path_type=Path),
              show_default="repro/evidence/ under the project root", help="Gate evidence root (<name>/manifest.json).")
@click.option("--results", "results_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Benchmark results JSON (repeatable); default: the file the evidence names, else the newest "
                   "repro/results/*.json with rows of the solution.")
def submit(solution_dirs, out_dir, gate, evidence_root, results_files):
    """Package the kernels of submission.toml (or SOLUTION_DIRS) for the contest, refusing any without complete,
    PASSED gate evidence for exactly these sources, or that breaks the contest rules."""
    from ..errors import BadInputError
    from ..paths import under_root
    from .build import build_submission, load_packages, refused

    out_dir = out_dir if out_dir is not None else under_root("dist")
    evidence_root = evidence_root if evidence_root is not None else under_root("repro/evidence")
    log = lambda line: click.echo(line, err=True)  # noqa: E731
    if gate:
        from .gating import gate_and_record, gpu_available
        from .rules import enforce

        if gpu_available():
            packages = load_packages(list(solution_dirs))
            for package in packages:
                try:
                    enforce(package)  # a rule break is refused before any GPU time is spent
                except BadInputError as exc:
                    raise refused(exc, out_dir) from None
            for package in packages:
                log(f"gating {package.name} on every official workload ...")
                log(f"evidence: {gate_and_record(package, evidence_root, list(results_files), log)}")
        else:
            log(f"no CUDA GPU here: packaging from the committed evidence in {evidence_root}")
    result = build_submission(list(solution_dirs), out_dir, evidence_root, list(results_files), log)
    click.echo(f"{result.folder}/ ({len(result.kernels)} kernel(s))")
    click.echo(f"{result.archive} sha256 {result.sha256}")

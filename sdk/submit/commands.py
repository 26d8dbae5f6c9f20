"""`fib-sdk submit [SOLUTION_DIRS...]`: write dist/submission/ and dist/submission.tar.gz from gated solutions."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInputError


@click.command("submit")
@click.argument("solution_dirs", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", default=Path("dist/submission"), show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Submission folder; the archive and its .sha256 go beside it.")
@click.option("--gate", is_flag=True,
              help="On a GPU, gate every official workload first and rewrite the evidence; without a GPU, "
                   "package from the committed evidence.")
@click.option("--evidence", "evidence_root", default=Path("repro/evidence"), show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Gate evidence root (<name>/manifest.json).")
@click.option("--results", "results_files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Benchmark results JSON (repeatable); default: the file the evidence names, else the newest "
                   "repro/results/*.json with rows of the solution.")
def submit(solution_dirs, out, gate, evidence_root, results_files):
    """Package SOLUTION_DIRS (default: every folder in solutions/) for the contest, refusing any solution
    without complete, PASSED gate evidence for exactly these sources, or that breaks the contest rules."""
    from .build import build_submission, load_packages

    log = lambda line: click.echo(line, err=True)  # noqa: E731
    try:
        if gate:
            from .gating import gate_and_record, gpu_available
            from .rules import enforce

            if gpu_available():
                packages = load_packages(list(solution_dirs))
                for package in packages:
                    enforce(package)  # a rule break is refused before any GPU time is spent
                for package in packages:
                    log(f"gating {package.name} on every official workload ...")
                    log(f"evidence: {gate_and_record(package, evidence_root, list(results_files), log)}")
            else:
                log(f"no CUDA GPU here: packaging from the committed evidence in {evidence_root}")
        result = build_submission(list(solution_dirs), out, evidence_root, list(results_files), log)
    except BadInputError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{result.folder}/ ({len(result.kernels)} kernel(s))")
    click.echo(f"{result.archive} sha256 {result.sha256}")

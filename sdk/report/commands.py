"""`fib-sdk report [RESULTS...] [--latest] --out DIR`: render REPORT.md and plots from benchmark results files.

A malformed input raises BadInputError, which `fib-sdk`'s group turns into one `error: ...` line and exit status 3.
"""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInputError


def latest_results(results_dir: Path) -> Path:
    """The most recently written results file in `results_dir` (ties: the later name)."""
    found = sorted(Path(results_dir).glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    if not found:
        raise BadInputError(f"no results files (*.json) in {results_dir}")
    return found[-1]


@click.command("report")
@click.argument("results", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--latest", is_flag=True, help="Add the newest results file of --results-dir.")
@click.option("--results-dir", default=None, show_default="repro/results/ under the project root",
              type=click.Path(file_okay=False, path_type=Path), help="Where --latest looks.")
@click.option("--out", "out_dir", default=None, show_default="repro/ under the project root",
              type=click.Path(file_okay=False, path_type=Path), help="Directory for REPORT.md and plots/.")
@click.option("--paper", "paper_toml", default=None, show_default="repro/paper.toml under the project root",
              type=click.Path(dir_okay=False, path_type=Path), help="The paper's claims (TOML).")
def report(results: tuple[Path, ...], latest: bool, results_dir: Path | None, out_dir: Path | None,
           paper_toml: Path | None) -> None:
    """Write OUT/REPORT.md (paper vs ours, per-workload tables, floors, environment) and OUT/plots/*.png."""
    from ..paths import under_root
    from .markdown import render_report  # tabulate/matplotlib only when the command runs

    results_dir = results_dir if results_dir is not None else under_root("repro/results")
    out_dir = out_dir if out_dir is not None else under_root("repro")
    paper_toml = paper_toml if paper_toml is not None else under_root("repro/paper.toml")
    paths = list(results) + ([latest_results(results_dir)] if latest else [])
    if not paths:
        raise click.UsageError("give RESULTS files or --latest")
    click.echo(str(render_report(paths, paper_toml, out_dir)))

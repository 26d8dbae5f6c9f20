"""`fib-sdk env ...`: the click layer over sdk.env (see its docstring for the device path)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

from . import wheels as wheels_mod
from .options import definitions_option

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


@click.group()
def env():
    """Set up an offline GPU machine (peer wheels, install, JIT prebuild) and show which definitions are in use."""


@env.command()
@click.option("--dest", type=click.Path(path_type=Path, file_okay=False), default=Path(".whl"), show_default=True)
@click.option("--only", multiple=True, help="Just this pinned wheel (repeatable); default: all of them.")
@click.option("--python", "python", default=wheels_mod.DEVICE_PYTHON, show_default=True,
              help="The GPU machine's Python version.")
@click.option("--platform", "platforms", multiple=True, help="pip platform tag (repeatable); default: manylinux "
              "x86_64 up to glibc 2.39.")
@click.option("--dry-run", is_flag=True, help="Print the pip commands instead of running them.")
def wheels(dest, only, python, platforms, dry_run):
    """Download the pinned peer and SDK wheels for the GPU machine (--no-deps, binary only) into DEST."""
    chosen = wheels_mod.select(list(only))
    platforms = tuple(platforms) or wheels_mod.DEVICE_PLATFORMS
    if dry_run:
        for w in chosen:
            click.echo(" ".join(wheels_mod.download_command(w, dest, python, platforms))
                       + ("   # then trimmed by sdk.peers.repack" if w.trim else ""))
        return
    files = wheels_mod.download(dest, chosen, python=python, platforms=platforms, echo=click.echo)
    total = sum(f.stat().st_size for f in files)
    click.echo(f"{len(files)} wheels, {wheels_mod.size_text(total)} in {dest} (git-ignored; it travels with the "
               "checkout)")


@env.command()
@click.option("--wheels", "wheels_dir", type=click.Path(path_type=Path, file_okay=False), default=Path(".whl"),
              show_default=True)
@click.option("--target", type=click.Path(path_type=Path, file_okay=False), default=Path(wheels_mod.DEFAULT_TARGET),
              show_default=True)
@click.option("--cache", type=click.Path(path_type=Path, file_okay=False), default=Path(wheels_mod.DEFAULT_CACHE),
              show_default=True, help="JIT caches (the SDK's kernels, DeepGEMM).")
def install(wheels_dir, target, cache):
    """Install the carried wheels offline into TARGET; print the exports (use: eval "$(python3 -m sdk env install)")."""
    files = wheels_mod.install(wheels_dir, target)
    click.echo(f"# installed {len(files)} wheel(s) from {wheels_dir} into {target}" if files
               else f"# no wheels in {wheels_dir}: nothing installed", err=True)
    cache.mkdir(parents=True, exist_ok=True)
    for line in wheels_mod.exports(target.resolve(), REPO_ROOT, cache.resolve()):
        click.echo(line)


@env.command()
@click.option("--only", default="", help="Only peers whose name contains this.")
@click.option("--check", is_flag=True, help="Also gate each peer against the reference and time it roughly.")
@click.option("--budget-s", default=300.0, show_default=True, help="No new peer row starts after this.")
@click.option("--grace-s", default=45.0, show_default=True, help="Extra time for a compile already running.")
@click.option("--iters", default=20, show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              default=lambda: os.environ.get("OUT"), help="Write peers_<mode>.json here (default: $OUT).")
def prebuild(only, check, budget_s, grace_s, iters, out_dir):
    """JIT-compile every available peer (and the probe kernel) once, each in a child process (GPU machine)."""
    from . import peers

    report = peers.run(only=only, check=check, budget_s=budget_s, grace_s=grace_s, iters=iters, out_dir=out_dir,
                       echo=click.echo)
    rows = report["rows"]
    built = sum(1 for r in rows if r.get("status") in ("BUILT", "PASSED"))
    click.echo(f"{report['mode']}: {built}/{len(rows)} rows built{' and passed' if check else ''}; "
               f"{sum(1 for r in rows if r.get('available') is False)} unavailable; {len(report['errors'])} errors")


@env.command("definitions")
@definitions_option
@click.option("--json", "as_json", is_flag=True)
def definitions_cmd(as_json):
    """Which definition and workload files are in use (official dataset or the SDK's own), with their sha256."""
    from ..definitions import sources

    entries = sources.environment_definitions()
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    for name, e in entries.items():
        click.echo(f"{name}\n  {e['source']:8s} {e['path']}  sha256 {e['sha256'][:16]}\n"
                   f"  workloads {e['workloads']['path']}  sha256 {(e['workloads']['sha256'] or '-')[:16]}")

"""`fib-sdk`: a thin click layer over the SDK's API. Errors in user files print one line and exit 2."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from tabulate import tabulate

from .errors import BadInputError


def _fail(exc: Exception):
    click.echo(f"error: {exc}", err=True)
    sys.exit(2)


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BadInputError as exc:
            _fail(exc)


@click.group(cls=_Group)
@click.version_option(package_name="fib-contest-sdk")
def main():
    """Definitions, workloads, correctness gate, benchmark and packaging for the FlashInfer-Bench contest kernels."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def definitions(as_json):
    """List the contest definitions with their axes, inputs and outputs."""
    from . import definitions as defs, workloads

    rows = []
    for name in defs.names():
        d = defs.load(name)
        rows.append({"name": name, "op_type": d.op_type, "var_axes": d.var_axes,
                     "inputs": list(d.inputs), "outputs": list(d.outputs), "workloads": len(workloads.load(name))})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(tabulate([[r["name"], r["op_type"], ",".join(r["var_axes"]), len(r["inputs"]),
                              ",".join(r["outputs"]), r["workloads"]] for r in rows],
                            headers=["definition", "op_type", "var axes", "inputs", "outputs", "workloads"]))


@main.command()
@click.argument("definition")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def workloads(definition, as_json):
    """List the workloads of DEFINITION (uuid, axes, which inputs come from blobs)."""
    from . import workloads as wl

    items = wl.load(definition)
    if as_json:
        click.echo(json.dumps([w.model_dump(mode="json") for w in items], indent=2))
        return
    rows = [[w.uuid, " ".join(f"{k}={v}" for k, v in w.axes.items()),
             ",".join(k for k, v in w.inputs.items() if v.type == "safetensors") or "-"] for w in items]
    click.echo(tabulate(rows, headers=["uuid", "axes", "blob inputs (seeded generator without a dataset)"]))


def _progress(as_json: bool):
    def report(i, n, result):
        if not as_json:
            click.echo(f"[{i}/{n}] {result.workload.uuid[:8]} {result.status}"
                       + (f": {result.reason}" if result.reason else ""), err=True)
    return report


@main.command()
@click.argument("solution_dir", type=click.Path(path_type=Path))
@click.option("--workloads", "keys", multiple=True, help="uuid prefix (repeatable); default: all workloads.")
@click.option("--trials", default=3, show_default=True, help="Fresh input sets per workload.")
@click.option("--seed", default=0, show_default=True)
@click.option("--timeout", default=300.0, show_default=True, help="Seconds per workload, build included.")
@click.option("--traces", type=click.Path(path_type=Path), help="Append flashinfer-bench Trace JSONL here.")
@click.option("--device", default=None, help="cuda, cuda:1 or cpu (default: cuda when available).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def gate(solution_dir, keys, trials, seed, timeout, traces, device, as_json):
    """Gate SOLUTION_DIR (a folder with config.toml) on its definition's workloads, FlashInfer-Bench rules."""
    from . import solutions, workloads as wl
    from .gate import contest_tolerance, gate_solution

    package = solutions.load_package(solution_dir)
    definition = package.solution.definition
    chosen = wl.select(definition, list(keys))
    results = gate_solution(package.solution, definition, chosen, trials=trials, seed=seed,
                            tol=contest_tolerance(definition), timeout_s=timeout, device=device,
                            trace_path=traces, progress=_progress(as_json))
    passed = sum(r.passed for r in results)
    if as_json:
        click.echo(json.dumps({"solution": package.name, "definition": definition, "passed": passed,
                               "total": len(results), "seed": seed, "trials": trials,
                               "results": [{"workload": r.workload.uuid, "axes": r.workload.axes, "status": r.status,
                                            "reason": r.reason, "max_abs": r.raw.get("max_abs"),
                                            "matched_ratio": (r.raw.get("extra") or {}).get("matched_ratio")}
                                           for r in results]}, indent=2))
    else:
        rows = [[r.workload.uuid[:8], " ".join(f"{k}={v}" for k, v in r.workload.axes.items()), r.status,
                 (r.raw.get("extra") or {}).get("matched_ratio"), r.raw.get("max_abs"), r.reason[:60]]
                for r in results]
        click.echo(tabulate(rows, headers=["workload", "axes", "status", "matched", "max abs", "reason"],
                            floatfmt=".4g"))
        click.echo(f"{package.name}: {passed}/{len(results)} PASSED ({trials} trials each, seed {seed})")
    sys.exit(0 if passed == len(results) else 1)


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


@main.command()
@click.argument("solution_dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--workloads", "keys", multiple=True, help="uuid prefix (repeatable); default: all workloads.")
@click.option("--stride", default=1, show_default=True, help="Every Nth workload (quick runs).")
@click.option("--trials", default=3, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--warmup", default=10, show_default=True)
@click.option("--iters", default=50, show_default=True)
@click.option("--timing", "method", type=click.Choice(["cupti", "events"]), default="cupti", show_default=True)
@click.option("--no-peers", is_flag=True, help="Skip the peer libraries.")
@click.option("--peers", "peer_filter", multiple=True, help="Only peers whose name contains this (repeatable).")
@click.option("--no-aa", is_flag=True, help="Skip the second timing of a solution (A/A noise).")
@click.option("--aa-every", default=4, show_default=True, help="A/A timing on every Nth workload.")
@click.option("--reference-iters", default=10, show_default=True, help="Timed calls of the (slow) reference per trial.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds per workload (gate and timing).")
@click.option("--compile-budget", default=600.0, show_default=True,
              help="Extra seconds for a worker's first workload: the solution's build and the peers' JIT compiles.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("repro/results"), show_default=True)
@click.option("--tag", default=None, help="Suffix of the results file name.")
@click.option("--traces", "trace_dir", type=click.Path(path_type=Path), help="Write Trace JSONL per solution here.")
@click.option("--remote", type=click.Choice(["modal"]), default=None, help="Run on a Modal B200 (see README).")
@click.option("--json", "as_json", is_flag=True, help="Print the results JSON instead of tables.")
def bench(solution_dirs, keys, stride, trials, seed, warmup, iters, method, no_peers, peer_filter, no_aa, aa_every, reference_iters,
          timeout, compile_budget, out_dir, tag, trace_dir, remote, as_json):
    """Gate and time SOLUTION_DIRS (default: every package in solutions/) with the reference and peers."""
    from . import solutions
    from .bench.runner import run_bench

    packages = [solutions.load_package(d) for d in solution_dirs] if solution_dirs else solutions.discover()
    if remote == "modal":
        from .bench import remote as remote_mod

        results = remote_mod.run_modal(packages, keys=list(keys), stride=stride, trials=trials, seed=seed)
        path = remote_mod.save(results, out_dir, tag)
    else:
        results, path = run_bench(packages, keys=list(keys), stride=stride, trials=trials, seed=seed, warmup=warmup,
                                  iters=iters, method=method, peers=not no_peers, peer_filter=list(peer_filter), aa=not no_aa,
                                  aa_every=aa_every,
                                  reference_iters=reference_iters, timeout_s=timeout,
                                  compile_budget_s=compile_budget,
                                  out_dir=out_dir, tag=tag, trace_dir=trace_dir,
                                  progress=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps(results, indent=1, default=str))
        return
    rows = []
    for r in results["rows"]:
        lat, ref, floor = r["latency_ms"], r["reference_latency_ms"], r["floor_ms"]
        peers = {k: v.get("latency_ms") for k, v in (r.get("peers") or {}).items() if v.get("latency_ms")}
        best = min(peers.items(), key=lambda kv: kv[1]) if peers else None
        rows.append([r["solution"], r["workload"][:8], " ".join(f"{k}={v}" for k, v in r["axes"].items()), r["status"],
                     _fmt(lat), _fmt(ref), _fmt(ref / lat if lat and ref else None, ".1f"), _fmt(floor),
                     _fmt(lat / floor if lat and floor else None, ".2f"),
                     f"{best[0]} {best[1]:.4g}" if best else "-", _fmt(r.get("aa_noise_pct"), ".1f")])
    click.echo(tabulate(rows, headers=["solution", "workload", "axes", "status", "ms", "ref ms", "x ref", "floor ms",
                                       "/floor", "best peer (ms)", "A/A %"]))
    srows = [[d, s.get("solution"), f"{s.get('passed')}/{s.get('total')}", _fmt(s.get("mean_speedup_vs_reference"), ".1f"),
              _fmt(s.get("geomean_speedup_vs_reference"), ".1f"), s.get("best_peer") or "-",
              _fmt(s.get("mean_speedup_vs_best_peer"), ".2f"), _fmt(s.get("mean_latency_over_floor"), ".2f")]
             for d, s in results["summary"].items()]
    click.echo(tabulate(srows, headers=["definition", "best solution", "passed", "mean x ref", "geomean x ref",
                                        "best peer", "mean x best peer", "mean lat/floor"]))
    click.echo(f"timing: {results['environment'].get('timing_method')}; speedups: mean of per-workload ratios "
               "and geometric mean; results: " + (str(path) if path else "(not written)"))


@main.command()
@click.argument("solution_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--results", "results_file", required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--traces", "trace_dir", required=True, type=click.Path(path_type=Path, exists=True),
              help="The folder `bench --traces` wrote (one <solution name>.jsonl each).")
@click.option("--out", "out_root", type=click.Path(path_type=Path), default=Path("repro/evidence"), show_default=True)
def evidence(solution_dirs, results_file, trace_dir, out_root):
    """Turn a GPU bench run (results + traces) into gate evidence for `submit` (checks the source hashes)."""
    from . import solutions
    from .submit.evidence import evidence_from_run

    for d in solution_dirs:
        package = solutions.load_package(d)
        folder = evidence_from_run(package, trace_dir / f"{package.name}.jsonl", results_file, out_root)
        click.echo(f"{package.name}: evidence in {folder}")


def _register(module: str, name: str) -> None:
    """Subcommands that live with their feature (report, submit, agent loop); imported when the CLI loads."""
    import importlib

    main.add_command(getattr(importlib.import_module(module, __package__), name))


for _module, _name in ((".report.commands", "report"), (".submit.commands", "submit"),
                      (".agent.commands", "regenerate"), (".agent.commands", "ledger"),
                      (".agent.mcp_server", "mcp")):
    _register(_module, _name)


if __name__ == "__main__":
    main()

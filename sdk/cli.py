"""`fib-sdk`: a thin click layer over the SDK's API.

Every error is one line on stderr, `error: <what>`, and the exit status says its kind (listed in sdk/errors.py and
the README, "Errors"). The commands that live with their feature (report, submit, regenerate, ledger) are imported
only when they run, and torch only when a command needs it, so `fib-sdk --help` starts in a fraction of a second.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import sys
from pathlib import Path

import click

from .env.options import definitions_option
from . import __version__
from .errors import (EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_UNAVAILABLE, EXIT_USAGE, BadInputError,
                     UnavailableError)

# name: (module, attribute, the one-line help `fib-sdk --help` shows without importing the module; a test checks
# that it is the command's own)
LAZY_COMMANDS = {
    "report": (".report.commands", "report",
               "Write OUT/REPORT.md (paper vs ours, per-workload tables, floors, environment) and OUT/plots/*.png."),
    "submit": (".submit.commands", "submit",
               "Package the kernels of submission.toml (or SOLUTION_DIRS) for the contest, refusing any without "
               "complete, PASSED gate evidence for exactly these sources, or that breaks the contest rules."),
    "regenerate": (".agent.commands", "regenerate",
                   "Without arguments: re-render every solution with a render.toml and fail on byte drift."),
    "ledger": (".agent.commands", "ledger", "Token and cost summary of a run folder, by definition, role and model."),
    "mcp": (".agent.mcp_server", "mcp", "Serve the SDK's gated kernel tools to an external coding agent over MCP "
                                        "(stdio)."),
    "env": (".env.commands", "env", "Set up an offline GPU machine (peer wheels, install, JIT prebuild) and show which "
                                    "definitions are in use."),
}


def fail(message: str, code: int):
    """Print `error: <message>` (one line) on stderr and exit with `code`."""
    line = " ".join(str(message).split())
    click.echo(f"error: {line}", err=True)
    sys.exit(code)


def _usage_message(exc: click.UsageError) -> str:
    message = exc.format_message().strip().rstrip(".")
    where = exc.ctx.command_path if exc.ctx is not None else "fib-sdk"
    return f"{message} (see '{where} --help')"


class _Group(click.Group):
    def list_commands(self, ctx):
        return sorted({*self.commands, *LAZY_COMMANDS})

    def get_command(self, ctx, name):
        if name not in self.commands and name in LAZY_COMMANDS:
            module, attribute, _ = LAZY_COMMANDS[name]
            self.add_command(getattr(importlib.import_module(module, __package__), attribute), name)
        return self.commands.get(name)

    def format_commands(self, ctx, formatter):
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, self.commands[n].get_short_help_str(limit) if n in self.commands
                 else click.Command(n, help=LAZY_COMMANDS[n][2]).get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's main, with every error as one `error: ...` line and the exit status of its kind."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            fail(_usage_message(exc), EXIT_USAGE)
        except click.ClickException as exc:  # e.g. raised by a subcommand for a bad input
            fail(exc.format_message(), EXIT_INPUT)
        except BadInputError as exc:
            fail(str(exc), EXIT_INPUT)
        except UnavailableError as exc:
            fail(str(exc), EXIT_UNAVAILABLE)
        except ModuleNotFoundError as exc:
            fail(f"{exc}: this Python lacks a package that fib-sdk needs ({sys.executable}; see the README, "
                 "'Install')", EXIT_UNAVAILABLE)
        except (click.Abort, KeyboardInterrupt):
            fail("interrupted", EXIT_INTERRUPTED)
        except BrokenPipeError:  # `fib-sdk workloads X | head`: the reader left, nothing to report
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except Exception as exc:
            if os.environ.get("FIB_SDK_TRACEBACK"):
                raise
            fail(f"internal error, a bug in fib-sdk: {type(exc).__name__}: {exc} (FIB_SDK_TRACEBACK=1 prints the "
                 "traceback)", EXIT_INTERNAL)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, context_settings={"max_content_width": 120})
@click.version_option(__version__, prog_name="fib-sdk")
def main():
    """Definitions, workloads, correctness gate, benchmark and packaging for the FlashInfer-Bench contest kernels.

    Errors are one line, `error: ...`; exit status 0 done, 1 a failed result (a workload not PASSED), 2 usage,
    3 bad input or a refused submission, 4 missing on this machine (CUDA, an optional package), 70 a bug."""


# ---- option checks (usage errors before anything runs) ----------------------------------------------------------

POSITIVE_INT = click.IntRange(min=1)
NON_NEGATIVE_INT = click.IntRange(min=0)
POSITIVE_SECONDS = click.FloatRange(min=0, min_open=True)
NON_NEGATIVE_SECONDS = click.FloatRange(min=0)


def _file_in_existing_folder(ctx, param, value: Path | None) -> Path | None:
    """A file to write: its folder must exist (a typo must not create folders), and it must not be a folder."""
    if value is None:
        return None
    folder = value.parent
    if not folder.is_dir():
        raise click.BadParameter(f"folder {folder} does not exist (create it first)", ctx, param)
    if value.is_dir():
        raise click.BadParameter(f"{value} is a folder; name a .jsonl file", ctx, param)
    return value


def _folder_in_existing_parent(ctx, param, value: Path | None) -> Path | None:
    """A folder to write into: it may be new, but the folder holding it must exist."""
    if value is None:
        return None
    if value.exists() and not value.is_dir():
        raise click.BadParameter(f"{value} is not a folder", ctx, param)
    if not value.parent.is_dir():
        raise click.BadParameter(f"folder {value.parent} does not exist (create it first)", ctx, param)
    return value


def _device(ctx, param, value: str | None) -> str | None:
    """cpu, cuda or cuda:N; a CUDA device that torch does not see is refused here, before a worker starts."""
    if value is None:
        return None
    if not re.fullmatch(r"cpu|cuda(:\d+)?", value):
        raise click.BadParameter(f"{value!r}: use cpu, cuda or cuda:N", ctx, param)
    if value.startswith("cuda"):
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(value.partition(":")[2] or 0)
        if index >= count:
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise UnavailableError(f"--device {value}: torch {torch.__version__} ({build}) sees {count} CUDA "
                                   "device(s) here; use --device cpu or run on a GPU machine")
    return value


def _packages(solution_dirs):
    """Load and check each SOLUTION_DIR (taken from the current folder, else the project root; none: every package
    in solutions/) before anything runs."""
    from . import definitions as defs, solutions
    from .paths import existing

    packages = [solutions.load_package(existing(d)) for d in solution_dirs] if solution_dirs else solutions.discover()
    for package in packages:
        solutions.check_entry(package, defs.load(package.solution.definition))
    return packages


@main.command()
@definitions_option
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
        from tabulate import tabulate

        click.echo(tabulate([[r["name"], r["op_type"], ",".join(r["var_axes"]), len(r["inputs"]),
                              ",".join(r["outputs"]), r["workloads"]] for r in rows],
                            headers=["definition", "op_type", "var axes", "inputs", "outputs", "workloads"]))


@main.command()
@definitions_option
@click.argument("definition")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def workloads(definition, as_json):
    """List the workloads of DEFINITION (uuid, axes, which inputs come from blobs)."""
    from . import workloads as wl

    items = wl.load(definition)
    if as_json:
        click.echo(json.dumps([w.model_dump(mode="json") for w in items], indent=2))
        return
    from tabulate import tabulate

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
@definitions_option
@click.argument("solution_dir", type=click.Path(path_type=Path))
@click.option("--workloads", "keys", multiple=True, help="uuid prefix (repeatable); default: all workloads.")
@click.option("--trials", default=3, show_default=True, type=POSITIVE_INT,
              help="Checked calls per workload, each on fresh inputs.")
@click.option("--seed", type=int, default=None, help="Input seed (default: drawn from the OS; printed and recorded).")
@click.option("--timeout", default=300.0, show_default=True, type=POSITIVE_SECONDS,
              help="Seconds per workload, build included.")
@click.option("--traces", type=click.Path(path_type=Path), callback=_file_in_existing_folder,
              help="Append flashinfer-bench Trace JSONL to this file (its folder must exist).")
@click.option("--device", default=None, callback=_device, help="cuda, cuda:1 or cpu (default: cuda when available).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def gate(solution_dir, keys, trials, seed, timeout, traces, device, as_json):
    """Gate SOLUTION_DIR (a folder with config.toml) on its definition's workloads, FlashInfer-Bench rules."""
    from tabulate import tabulate

    from . import workloads as wl
    from .gate import contest_tolerance, gate_solution

    from .gate import draw_seed

    package, = _packages([solution_dir])
    definition = package.solution.definition
    chosen = wl.select(definition, list(keys))
    seed = draw_seed() if seed is None else seed
    results = gate_solution(package.solution, definition, chosen, trials=trials, seed=seed,
                            tol=contest_tolerance(definition), timeout_s=timeout, device=device,
                            trace_path=traces, progress=_progress(as_json))
    passed = sum(r.passed for r in results)
    if as_json:
        click.echo(json.dumps({"solution": package.name, "definition": definition, "passed": passed,
                               "total": len(results), "seed": seed, "trials": trials,
                               "results": [{"workload": r.workload.uuid, "axes": r.workload.axes, "status": r.status,
                                            "reason": r.reason, "max_abs": r.raw.get("max_abs"),
                                            "strict": r.raw.get("strict"), "gate_s": r.raw.get("gate_s"),
                                            "matched_ratio": (r.raw.get("extra") or {}).get("matched_ratio")}
                                           for r in results]}, indent=2))
    else:
        rows = [[r.workload.uuid[:8], " ".join(f"{k}={v}" for k, v in r.workload.axes.items()), r.status,
                 "ok" if r.strict_passed else "FAIL", (r.raw.get("extra") or {}).get("matched_ratio"),
                 r.raw.get("max_abs"), r.raw.get("gate_s"),
                 (r.reason or (r.raw.get("strict") or {}).get("reason", "") if not r.strict_passed else r.reason)[:60]]
                for r in results]
        click.echo(tabulate(rows, headers=["workload", "axes", "status", "strict", "matched", "max abs", "gate s",
                                           "reason"], floatfmt=".4g"))
        strict = sum(r.strict_passed for r in results)
        if results and results[0].raw.get("note"):
            click.echo(results[0].raw["note"])
        click.echo(f"{package.name}: {passed}/{len(results)} PASSED, {strict} strict ({trials} trials each, "
                   f"seed {seed})")
    sys.exit(0 if passed == len(results) else 1)


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


@main.command()
@definitions_option
@click.argument("solution_dirs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--definition", "definition_filter", multiple=True,
              help="Only the packages of definitions whose name contains this (repeatable), e.g. moe: one "
                   "definition per device call when the whole bench does not fit in one.")
@click.option("--workloads", "keys", multiple=True, help="uuid prefix (repeatable); default: all workloads.")
@click.option("--stride", default=1, show_default=True, type=POSITIVE_INT, help="Every Nth workload (quick runs).")
@click.option("--trials", default=3, show_default=True, type=POSITIVE_INT)
@click.option("--seed", type=int, default=None, help="Input seed (default: drawn from the OS; recorded).")
@click.option("--warmup", default=10, show_default=True, type=NON_NEGATIVE_INT)
@click.option("--iters", default=50, show_default=True, type=POSITIVE_INT)
@click.option("--checks", default=3, show_default=True, type=NON_NEGATIVE_INT,
              help="Checked calls per trial besides the first, chosen at random after each call.")
@click.option("--budget-ms", default=100.0, show_default=True, type=NON_NEGATIVE_SECONDS,
              help="Per trial and callable, timed wall time that sizes --iters: slow calls get fewer, at least "
                   "--min-iters (0: always --iters).")
@click.option("--min-iters", default=10, show_default=True, type=POSITIVE_INT)
@click.option("--no-peers", is_flag=True, help="Skip the peer libraries.")
@click.option("--peers", "peer_filter", multiple=True, help="Only peers whose name contains this (repeatable).")
@click.option("--no-reference", is_flag=True, help="Do not time the reference.")
@click.option("--reference-after", is_flag=True,
              help="Time the reference after the solutions, once per workload, instead of between each solution's "
                   "trials (the default on one device).")
@click.option("--baseline-every", default=1, show_default=True, type=POSITIVE_INT,
              help="Time reference and peers on every Nth workload.")
@click.option("--reference-iters", default=10, show_default=True, type=POSITIVE_INT,
              help="Timed calls of the (slow) reference per trial.")
@click.option("--peer-draws", default=8, show_default=True, type=POSITIVE_INT,
              help="Fresh draws per trial that a peer's timed calls cycle through (a solution sees a new one every "
                   "call).")
@click.option("--timeout", default=600.0, show_default=True, type=POSITIVE_SECONDS,
              help="Seconds per workload (gate and timing).")
@click.option("--compile-budget", default=600.0, show_default=True, type=NON_NEGATIVE_SECONDS,
              help="Extra seconds for a worker's first workload: the solution's build and the peers' JIT compiles.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              show_default="repro/results/ under the project root", help="Folder of the results file.")
@click.option("--tag", default=None, help="Suffix of the results file name.")
@click.option("--traces", "trace_dir", type=click.Path(path_type=Path), callback=_folder_in_existing_parent,
              help="Write Trace JSONL per solution into this folder (the folder holding it must exist).")
@click.option("--remote", type=click.Choice(["modal"]), default=None,
              help="Run on a Modal B200 (README, 'Remote bench on Modal').")
@click.option("--settings", "settings_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML of bench settings per definition ([<part of the definition name>] with e.g. iters = 20); "
                   "options given here win. `nox -s repro` passes repro/settings.toml.")
@click.option("--json", "as_json", is_flag=True, help="Print the results JSON instead of tables.")
@click.pass_context
def bench(ctx, solution_dirs, definition_filter, keys, stride, trials, seed, warmup, iters, checks, budget_ms,
          min_iters, no_peers, peer_filter, no_reference, reference_after, baseline_every, reference_iters, peer_draws,
          timeout, compile_budget, out_dir, tag, trace_dir, remote, settings_file, as_json):
    """Gate and time SOLUTION_DIRS (default: every package in solutions/) with the reference and peers."""
    from click.core import ParameterSource
    from pydantic import ValidationError
    from tabulate import tabulate

    from .bench import scoring
    from .bench.config import BenchConfig
    from .bench.runner import run_bench
    from .paths import under_root

    packages = _packages(solution_dirs)
    if definition_filter:
        packages = [p for p in packages if any(f in p.solution.definition for f in definition_filter)]
        if not packages:
            raise BadInputError(f"no package's definition contains {' or '.join(definition_filter)}")
        tag = "-".join([*([tag] if tag else []), *definition_filter])  # one results file per definition's run
    tuned = dict(trials=trials, warmup=warmup, iters=iters, checks=checks, budget_ms=budget_ms or None,
                 min_iters=min_iters, reference_iters=reference_iters, peer_draws=peer_draws, timeout_s=timeout,
                 compile_budget_s=compile_budget, peer_filter=list(peer_filter))
    if settings_file:
        from .bench.settings import settings_for

        option = {"timeout_s": "timeout", "compile_budget_s": "compile_budget"}
        for key, value in settings_for(settings_file, {p.solution.definition for p in packages}).items():
            if ctx.get_parameter_source(option.get(key, key)) is ParameterSource.DEFAULT:
                tuned[key] = None if key == "budget_ms" and value == 0 else value  # 0: always --iters
    try:
        config = BenchConfig(keys=list(keys), stride=stride, seed=seed, peers=not no_peers,
                             reference=not no_reference,
                             interleave_reference=not reference_after,
                             baseline_every=baseline_every, **tuned)
    except ValidationError as exc:  # a bad value in --settings (the options' own types are checked by click)
        raise BadInputError("bench settings: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                            for e in exc.errors())) from None
    out_dir = out_dir if out_dir is not None else under_root("repro/results")
    if remote == "modal":
        from .bench import remote as remote_mod

        results = remote_mod.run_modal(packages, keys=list(keys), stride=stride, trials=trials, seed=seed)
        path = remote_mod.save(results, out_dir, tag)
    else:
        results, path = run_bench(packages, config, out_dir=out_dir, tag=tag, trace_dir=trace_dir,
                                  progress=lambda line: click.echo(line, err=True))
    passed = sum(r["status"] == "PASSED" for r in results["rows"])
    if as_json:
        click.echo(json.dumps(results, indent=1, default=str))
        sys.exit(0 if passed else 1)
    rows = []
    for r in results["rows"]:
        lat, ref, floor = r["latency_ms"], r["reference_latency_ms"], r["floor_ms"]
        peers = {k: v.get("latency_ms") for k, v in (r.get("peers") or {}).items() if v.get("latency_ms")}
        best = min(peers.items(), key=lambda kv: kv[1]) if peers else None
        rows.append([r["solution"], r["workload"][:8], " ".join(f"{k}={v}" for k, v in r["axes"].items()),
                     r["status"] + ("" if r.get("strict_passed") or r["status"] != "PASSED" else " (strict FAIL)"),
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
    if bound := scoring.launch_bound(results["rows"]):
        def idle(r: dict) -> str:
            return (f"idle {r['idle_ms']:.4g}" if r.get("idle_ms") is not None else f"host {r['host_ms']:.4g}")
        click.echo(f"launch-bound (the GPU waits for the next launch >= {scoring.LAUNCH_BOUND:.0%} of a call's span, "
                   "`idle_ms`; older rows: host time, `host_ms`): "
                   + ", ".join(f"{r['solution']} {r['workload'][:8]} {idle(r)}/{r['latency_ms']:.4g} ms"
                               for r in bound[:8]) + (f" and {len(bound) - 8} more" if len(bound) > 8 else ""))
    click.echo(f"timing: {results['environment'].get('timing_method')}; reference: "
               f"{results['environment'].get('reference_timing', '-')}; speedups: mean of per-workload ratios "
               "and geometric mean; results: " + (str(path) if path else "(not written)"))
    if not passed:
        click.echo(f"bench: 0/{len(results['rows'])} rows PASSED the gate: nothing was timed", err=True)
        sys.exit(1)


@main.command()
@click.argument("solution_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--results", "results_file", required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--traces", "trace_dir", required=True, type=click.Path(path_type=Path, exists=True),
              help="The folder `bench --traces` wrote (one <solution name>.jsonl each).")
@click.option("--out", "out_root", type=click.Path(file_okay=False, path_type=Path), default=None,
              show_default="repro/evidence/ under the project root")
def evidence(solution_dirs, results_file, trace_dir, out_root):
    """Turn a GPU bench run (results + traces) into gate evidence for `submit` (checks the source hashes)."""
    from .paths import under_root
    from .submit.evidence import evidence_from_run

    out_root = out_root if out_root is not None else under_root("repro/evidence")
    for package in _packages(solution_dirs):
        folder = evidence_from_run(package, trace_dir / f"{package.name}.jsonl", results_file, out_root)
        click.echo(f"{package.name}: evidence in {folder}")


@main.command()
@click.argument("results_file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Only list the rows that would change.")
def rescore(results_file, dry_run):
    """Re-apply the current plausibility rule (latency vs physical floor) to a results file's recorded latencies."""
    from .bench.rescore import rescore_file

    changed = rescore_file(results_file, write_back=not dry_run)
    verb = "would change" if dry_run else "changed"
    click.echo(f"{results_file}: {verb} {len(changed)} row(s)" + (f": {', '.join(u[:8] for u in changed)}"
                                                                  if changed else ""))


if __name__ == "__main__":
    main()

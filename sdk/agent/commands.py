"""Click commands: `regenerate` (drift check by default, the agent loop with definitions or a backend) and
`ledger RUN_DIR` (token summary of a run; `--import-otel` adds an external agent's usage). `sdk/cli.py`
registers them (and `mcp`, in sdk.agent.mcp_server); `python -m sdk.agent.run` is the same loop with
`--definition` options, for one-call GPU runs. A model backend whose calls all failed exits with status 3."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from tabulate import tabulate

from .. import definitions as defs
from .. import render
from ..errors import BadInputError
from ..regenerate import check_drift, rendered_solutions

PATH = click.Path(path_type=Path)


def loop_options(func):
    """Options shared by `regenerate` and `python -m sdk.agent.run`."""
    options = [
        click.option("--backend", type=click.Choice(["offline", "litellm", "scripted", "replay"]), default=None,
                     help="offline (default when looping: seeded template search), litellm (any hosted or local "
                          "model), scripted (--script, no network) or replay (--replay-from)."),
        click.option("--model", envvar="FIB_SDK_MODEL", help="litellm model id, e.g. anthropic/claude-..., "
                     "openai/gpt-..., openai/<name> with --api-base (keys: the provider's own variables)."),
        click.option("--api-base", envvar="FIB_SDK_API_BASE", help="Base URL of an OpenAI-compatible server "
                     "(vLLM, llama.cpp, a proxy), e.g. http://127.0.0.1:8000/v1."),
        click.option("--script", type=PATH, help="Scripted replies for --backend scripted (sdk/agent/script.py)."),
        click.option("--budget-tokens", type=int, help="Run token budget; no call starts that could exceed it."),
        click.option("--budget-wall-s", type=float, help="Stop before a model call after this many seconds."),
        click.option("--max-iters", type=int, help="Candidates per definition (default 6)."),
        click.option("--parallel", type=int, default=1, show_default=True,
                     help="Candidates in flight per round (compiles in parallel, one gate per GPU)."),
        click.option("--frontier", type=int, default=3, show_default=True,
                     help="Accepted candidates kept as parents for new ones."),
        click.option("--max-turns", type=int, default=12, show_default=True, help="Model turns per candidate."),
        click.option("--candidate-tokens", type=int, help="Token budget per candidate (checked before each call)."),
        click.option("--max-output-tokens", type=int, default=8192, show_default=True,
                     help="Output cap of one model call."),
        click.option("--prompt-chars", type=int, default=60_000, show_default=True,
                     help="Budget of the task brief; files that do not fit are listed for read_file, never cut."),
        click.option("--run-dir", type=PATH, help="Run folder (default runs/<time>-<backend>)."),
        click.option("--seed", type=int, help="Search and gate seed (default 0)."),
        click.option("--template", help="Template name (default: the one declaring the definition)."),
        click.option("--templates-root", type=PATH, default=None, help="Folder of templates (default templates/)."),
        click.option("--workloads", multiple=True, help="Workload uuid prefixes for gate and bench (repeat or "
                     "comma-separate; default 4 representative ones, small to large)."),
        click.option("--workloads-file", type=PATH, help="Workloads JSONL (contest trace lines) to use instead of "
                     "the official set, e.g. small ones for --cpu-gate."),
        click.option("--trials", type=int, default=3, show_default=True, help="Gate trials per workload."),
        click.option("--cpu-gate", is_flag=True, help="Without a GPU, gate the torch fallback on the CPU "
                     "(never timed)."),
        click.option("--compile-jobs", type=int, default=2, show_default=True, help="Parallel nvcc compiles."),
        click.option("--policy", type=PATH, help="Policy TOML (forbidden patterns, rules); default built-in."),
        click.option("--reference", "references", type=PATH, multiple=True, help="Reference file for the prompts."),
        click.option("--redirect", type=PATH, help="Redirect note read every round (default RUN/redirect.md)."),
        click.option("--promote-to", type=PATH, help="Where the best candidate goes (default RUN/promoted)."),
        click.option("--promote-name", help="Solution folder name for the promoted candidate (default template)."),
        click.option("--min-gain", type=float, default=0.02, show_default=True, help="Noise margin for a win."),
        click.option("--compile-check", type=click.Choice(["auto", "always", "never"]), default="auto",
                     show_default=True, help="nvcc sm_90a check; auto = only where no GPU builds it."),
        click.option("--profile", is_flag=True, help="Run ncu on the slowest workload of timed candidates."),
        click.option("--replay-from", type=PATH, help="Recorded run folder for --backend replay."),
        click.option("--timeout-s", type=float, default=180.0, show_default=True,
                     help="Deadline of one model call, its retries included."),
        click.option("--max-retries", type=int, default=3, show_default=True,
                     help="Retries of a transient model error (the client's own retries are off)."),
        click.option("--retry-backoff-s", type=float, default=2.0, show_default=True,
                     help="First back-off before a retry (doubles each time, within --timeout-s)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _split(values) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def build_config(definitions: list[str], opts: dict):
    from .loop import RunConfig
    backend = opts["backend"] or "offline"
    recorded = {}
    if backend == "replay":
        if not opts["replay_from"]:
            raise BadInputError("--backend replay needs --replay-from RUN_DIR")
        manifest = Path(opts["replay_from"]) / "run.json"
        if not manifest.exists():
            raise BadInputError(f"{opts['replay_from']}: no run.json (not a recorded run folder)")
        recorded = json.loads(manifest.read_text())["config"]
    if backend == "scripted" and not opts["script"]:
        raise BadInputError("--backend scripted needs --script FILE")
    definitions = list(definitions) or recorded.get("definitions") or []
    template = opts["template"] or recorded.get("template")
    for name in definitions:
        if name not in defs.names():
            raise BadInputError(f"unknown definition {name!r}; known: {', '.join(defs.names())}")
    run_dir = opts["run_dir"] or Path("runs") / (time.strftime("%Y%m%d-%H%M%S") + f"-{backend}")

    def pick(name, default):
        return opts[name] if opts.get(name) is not None else recorded.get(name, default)

    return RunConfig(
        run_dir=run_dir, definitions=definitions, backend=backend, model=opts["model"], api_base=opts["api_base"],
        script=opts["script"], seed=pick("seed", 0), max_iters=pick("max_iters", 6),
        budget_tokens=opts["budget_tokens"], budget_wall_s=opts["budget_wall_s"], template=template,
        templates_root=opts["templates_root"] or Path(recorded.get("templates_root") or render.TEMPLATES),
        workloads=_split(opts["workloads"]) or recorded.get("workloads", []), trials=opts["trials"],
        parallel=recorded.get("parallel", opts["parallel"]) if backend == "replay" else opts["parallel"],
        frontier=opts["frontier"], max_turns=opts["max_turns"], candidate_tokens=opts["candidate_tokens"],
        max_output_tokens=opts["max_output_tokens"], prompt_chars=opts["prompt_chars"], cpu_gate=opts["cpu_gate"],
        compile_jobs=opts["compile_jobs"], policy=opts["policy"], references=list(opts["references"]),
        redirect=opts["redirect"], promote_to=opts["promote_to"], promote_name=opts["promote_name"],
        min_gain=opts["min_gain"], compile_check=opts["compile_check"], profile=opts["profile"],
        replay_from=opts["replay_from"], timeout_s=opts["timeout_s"], max_retries=opts["max_retries"],
        retry_backoff_s=opts["retry_backoff_s"],
        workloads_file=opts["workloads_file"] or (Path(recorded["workloads_file"]) if recorded.get("workloads_file")
                                                  else None))


def run_and_report(config) -> dict:
    from .hooks import Hooks
    from .loop import MODEL_BACKENDS, run
    summary = run(config, hooks=Hooks(workloads_file=config.workloads_file))
    rows = []
    for d in summary["definitions"]:
        best = d["best"] or {}
        rows.append([d["definition"][:40], d["template"], d["candidates"],
                     " ".join(f"{k}:{v}" for k, v in d["decisions"].items() if v),
                     best.get("id", "-"), best.get("latency_ms", "-"), best.get("speedup_vs_reference") or "-",
                     best.get("speedup_vs_parent") or "-", d["promoted"] or "-", d["stop_reason"]])
    click.echo(tabulate(rows, headers=["definition", "template", "cands", "decisions", "best", "ms", "vs ref",
                                       "vs parent", "promoted", "stopped"], tablefmt="github"))
    total, calls = summary["ledger"]["total"], summary["model_calls"]
    click.echo(f"\nrun {summary['run_id']} in {summary['run_dir']}: {calls['total']} model call(s), {calls['ok']} "
               f"answered, {total['gen_ai.usage.input_tokens']} input + {total['gen_ai.usage.output_tokens']} "
               f"output tokens")
    if not summary["gpu"]:
        click.echo("not timed: no GPU (candidates were rendered, scanned, compile-checked"
                   + (" and gated on the CPU torch fallback)" if config.cpu_gate else ")"))
    if config.backend in MODEL_BACKENDS and calls["ok"] == 0:
        click.echo(f"error: no model call succeeded ({calls['total']} attempted); see {summary['run_dir']}/"
                   f"ledger.jsonl", err=True)
        sys.exit(3)
    return summary


def _drift(solutions_root: Path | None, templates_root: Path | None) -> None:
    problems = check_drift(solutions_root, templates_root or render.TEMPLATES)
    count = len(rendered_solutions(solutions_root))
    if problems:
        for line in problems:
            click.echo(f"DRIFT {line}", err=True)
        click.echo(f"{len(problems)} drifted file(s) across {count} rendered solution(s)", err=True)
        sys.exit(1)
    click.echo(f"no drift: {count} rendered solution(s) re-render byte for byte")


@click.command("regenerate")
@click.argument("definitions", nargs=-1)
@loop_options
@click.option("--check-drift", "drift", is_flag=True, help="Run the drift check before the loop.")
@click.option("--solutions-root", type=PATH, default=None, help="Solutions folder for the drift check.")
def regenerate(definitions, drift, solutions_root, **opts):
    """Without arguments: re-render every solution with a render.toml and fail on byte drift. With DEFINITION(s)
    or --backend: run the agent loop (offline seeded search by default) and promote the best gated candidate."""
    try:
        if not definitions and opts["backend"] is None:
            _drift(solutions_root, opts["templates_root"])
            return
        if drift:
            _drift(solutions_root, opts["templates_root"])
        run_and_report(build_config(list(definitions), opts))
    except BadInputError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("ledger")
@click.argument("run_dir", type=PATH)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--import-otel", "imports", type=PATH, multiple=True,
              help="Add an external agent's token usage from its OpenTelemetry export (JSON / JSONL spans or "
                   "log records with gen_ai.usage.* attributes); records already imported are skipped.")
@click.option("--agent", default=None, help="Name for the imported agent (default: the export's service.name).")
def ledger(run_dir, as_json, imports, agent):
    """Token and cost summary of a run folder, by definition, role and model."""
    from .ledger import format_summary, load_run, summarize
    from .otel_import import import_usage
    try:
        for path in imports:
            added, skipped = import_usage(run_dir, path, agent=agent)
            click.echo(f"{path}: {added} usage record(s) imported, {skipped} already in the ledger", err=True)
        summary = summarize(load_run(run_dir))
    except BadInputError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(summary, indent=1, sort_keys=True) if as_json else format_summary(summary))

"""Click commands: `regenerate` (drift check by default, the agent loop with definitions or a backend) and
`ledger RUN_DIR` (token summary of a run). The lead wires them into `sdk/cli.py`; `python -m sdk.agent.run` is
the same loop with `--definition` options, for one-call GPU runs."""
from __future__ import annotations

import json
import sys
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
        click.option("--backend", type=click.Choice(["offline", "litellm", "replay"]), default=None,
                     help="offline (default when looping: seeded template search), litellm or replay."),
        click.option("--model", envvar="FIB_SDK_MODEL", help="litellm model id, e.g. anthropic/claude-... "
                     "(provider keys come from the provider's own environment variables)."),
        click.option("--budget-tokens", type=int, help="Stop before a model call once this many tokens are used."),
        click.option("--budget-wall-s", type=float, help="Stop before a model call after this many seconds."),
        click.option("--max-iters", type=int, help="Candidates per definition (default 6)."),
        click.option("--run-dir", type=PATH, help="Run folder (default runs/<time>-<backend>)."),
        click.option("--seed", type=int, help="Search and gate seed (default 0)."),
        click.option("--template", help="Template name (default: the one declaring the definition)."),
        click.option("--templates-root", type=PATH, default=None, help="Folder of templates (default templates/)."),
        click.option("--workloads", multiple=True, help="Workload uuid prefixes for gate and bench (repeat or "
                     "comma-separate; default 4 representative ones, small to large)."),
        click.option("--trials", type=int, default=3, show_default=True, help="Gate trials per workload."),
        click.option("--policy", type=PATH, help="Policy TOML (forbidden patterns, rules); default built-in."),
        click.option("--reference", "references", type=PATH, multiple=True, help="Reference file for the prompts."),
        click.option("--redirect", type=PATH, help="Redirect note read every iteration (default RUN/redirect.md)."),
        click.option("--promote-to", type=PATH, help="Where the best candidate goes (default RUN/promoted)."),
        click.option("--promote-name", help="Solution folder name for the promoted candidate (default template)."),
        click.option("--min-gain", type=float, default=0.02, show_default=True, help="Noise margin for a win."),
        click.option("--compile-check", type=click.Choice(["auto", "always", "never"]), default="auto",
                     show_default=True, help="nvcc sm_90a check; auto = only where no GPU builds it."),
        click.option("--profile", is_flag=True, help="Run ncu on the slowest workload of timed candidates."),
        click.option("--replay-from", type=PATH, help="Recorded run folder for --backend replay."),
        click.option("--mock-responses", type=PATH, help="JSON list / JSONL of scripted litellm mock_response "
                     "values, one per call (offline CI of the litellm path)."),
        click.option("--timeout-s", type=float, default=180.0, show_default=True, help="Per model call."),
        click.option("--max-retries", type=int, default=3, show_default=True, help="Transient-error retries."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _mocks(path: Path | None) -> list | None:
    if path is None:
        return None
    text = path.read_text()
    try:
        value = json.loads(text)
        return value if isinstance(value, list) else [value]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


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
    definitions = list(definitions) or recorded.get("definitions") or []
    template = opts["template"] or recorded.get("template")
    for name in definitions:
        if name not in defs.names():
            raise BadInputError(f"unknown definition {name!r}; known: {', '.join(defs.names())}")
    run_dir = opts["run_dir"] or Path("runs") / (__import__("time").strftime("%Y%m%d-%H%M%S") + f"-{backend}")
    return RunConfig(
        run_dir=run_dir, definitions=definitions, backend=backend, model=opts["model"],
        seed=opts["seed"] if opts["seed"] is not None else recorded.get("seed", 0),
        max_iters=opts["max_iters"] if opts["max_iters"] is not None else recorded.get("max_iters", 6),
        budget_tokens=opts["budget_tokens"], budget_wall_s=opts["budget_wall_s"], template=template,
        templates_root=opts["templates_root"] or Path(recorded.get("templates_root") or render.TEMPLATES),
        workloads=_split(opts["workloads"]) or recorded.get("workloads", []), trials=opts["trials"],
        policy=opts["policy"], references=list(opts["references"]), redirect=opts["redirect"],
        promote_to=opts["promote_to"], promote_name=opts["promote_name"], min_gain=opts["min_gain"],
        compile_check=opts["compile_check"], profile=opts["profile"], replay_from=opts["replay_from"],
        mock_responses=_mocks(opts["mock_responses"]), timeout_s=opts["timeout_s"], max_retries=opts["max_retries"])


def run_and_report(config) -> dict:
    from .loop import run
    summary = run(config)
    rows = []
    for d in summary["definitions"]:
        best = d["best"] or {}
        rows.append([d["definition"][:40], d["template"], d["candidates"],
                     " ".join(f"{k}:{v}" for k, v in d["decisions"].items() if v),
                     best.get("id", "-"), best.get("latency_ms", "-"), best.get("speedup", "-"),
                     d["promoted"] or "-", d["stop_reason"]])
    click.echo(tabulate(rows, headers=["definition", "template", "cands", "decisions", "best", "ms", "speedup",
                                       "promoted", "stopped"], tablefmt="github"))
    total = summary["ledger"]["total"]
    click.echo(f"\nrun {summary['run_id']} in {summary['run_dir']}: {total['calls']} model call(s), "
               f"{total['gen_ai.usage.input_tokens']} input + {total['gen_ai.usage.output_tokens']} output tokens")
    if not summary["gpu"]:
        click.echo("not timed: no GPU (candidates were rendered, scanned and compile-checked only)")
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
def ledger(run_dir, as_json):
    """Token and cost summary of a run folder, by definition, role and model."""
    from .ledger import format_summary, load_run, summarize
    try:
        summary = summarize(load_run(run_dir))
    except BadInputError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(summary, indent=1, sort_keys=True) if as_json else format_summary(summary))

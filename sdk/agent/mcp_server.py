"""`fib-sdk mcp`: the SDK's correctness-gated kernel tools over the Model Context Protocol (stdio), for any
coding agent (Claude Code, Codex, an IDE agent): the same tools as the loop's model sessions plus task,
start_candidate, finish_candidate and candidates, served by the official `mcp` package (the `agent` extra).

    fib-sdk mcp --run-dir runs/mcp-1 [--cpu-gate] [--workloads 30cecff1,...]

Register it with an agent as a stdio server whose command is `fib-sdk mcp --run-dir DIR`; the run folder then
holds the lineage, the ledger of tool calls and the promoted best kernel (sdk.agent.service).
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import BadInputError

INSTRUCTIONS = ("Kernel-optimisation tools for the FlashInfer-Bench contest definitions. Call task(definition) "
                "first; then start_candidate, change it with apply_patch or render_template, check with compile, "
                "gate and bench, and end it with finish_candidate: the SDK gates it on the run's workloads, times "
                "it on a GPU and decides. Only gated candidates can be accepted.")


def build_server(service):
    """An MCPServer whose tools call `service` (an AgentService)."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        raise BadInputError("fib-sdk mcp needs the official MCP SDK >= 2: pip install 'fib-contest-sdk[agent]'") \
            from None
    from .tools import SPECS

    server = MCPServer("fib-sdk", instructions=INSTRUCTIONS)

    def text(value) -> str:
        return value if isinstance(value, str) else json.dumps(value, indent=1, default=str)

    def guarded(fn):
        def call(*args, **kwargs):
            try:
                return text(fn(*args, **kwargs))
            except BadInputError as exc:  # shown to the agent as the tool's answer, not a protocol error
                return f"error: {exc}"
        return call

    @server.tool(description="The task for a definition: definition JSON, PyTorch reference, workloads, the current "
                             "best kernel's evidence, skills and sources (what does not fit is listed for "
                             "read_file).")
    def task(definition: str) -> str:
        return guarded(service.task)(definition)

    @server.tool(description="Start a candidate of `definition`: a copy of `parent`'s sources (a candidate id of "
                             "this run) or the template's default point. Returns its id.")
    def start_candidate(definition: str, parent: str | None = None, note: str = "") -> str:
        return guarded(service.start_candidate)(definition, parent, note)

    @server.tool(description=SPECS["list_files"]["description"])
    def list_files(candidate: str) -> str:
        return guarded(service.tool)(candidate, "list_files", {})

    @server.tool(description=SPECS["read_file"]["description"])
    def read_file(candidate: str, path: str, start_line: int = 1, end_line: int | None = None) -> str:
        return guarded(service.tool)(candidate, "read_file", {"path": path, "start_line": start_line,
                                                               "end_line": end_line})

    @server.tool(description=SPECS["apply_patch"]["description"])
    def apply_patch(candidate: str, diff: str) -> str:
        return guarded(service.tool)(candidate, "apply_patch", {"diff": diff})

    @server.tool(description=SPECS["render_template"]["description"])
    def render_template(candidate: str, params: dict) -> str:
        return guarded(service.tool)(candidate, "render_template", {"params": params})

    @server.tool(name="compile", description=SPECS["compile"]["description"])
    def compile_(candidate: str) -> str:
        return guarded(service.tool)(candidate, "compile", {})

    @server.tool(description=SPECS["gate"]["description"])
    def gate(candidate: str, workloads: list[str] | None = None, trials: int | None = None) -> str:
        return guarded(service.tool)(candidate, "gate", {"workloads": workloads, "trials": trials})

    @server.tool(description=SPECS["bench"]["description"])
    def bench(candidate: str, workloads: list[str] | None = None) -> str:
        return guarded(service.tool)(candidate, "bench", {"workloads": workloads})

    @server.tool(description=SPECS["profile"]["description"])
    def profile(candidate: str, workload: str | None = None) -> str:
        return guarded(service.tool)(candidate, "profile", {"workload": workload})

    @server.tool(description="Finish a candidate: the SDK runs its pipeline (scan, compile, gate on the run's "
                             "workloads, timing on a GPU), decides (accept / rework / reject / blocked) and records "
                             "it in the lineage; an accepted new best is promoted.")
    def finish_candidate(candidate: str, summary: str) -> str:
        return guarded(service.finish_candidate)(candidate, summary)

    @server.tool(description="The lineage of this run (every finished candidate with its decision and speedups) "
                             "and the candidates still in progress.")
    def candidates(definition: str | None = None) -> str:
        return guarded(service.candidates)(definition)

    return server


@click.command("mcp")
@click.option("--run-dir", type=click.Path(path_type=Path), required=True, help="Run folder (lineage, ledger).")
@click.option("--agent", default="mcp-client", show_default=True, help="Name recorded for the external agent.")
@click.option("--workloads", multiple=True, help="Workload uuid prefixes for the final gate (default: 4 "
              "representative ones per definition).")
@click.option("--workloads-file", type=click.Path(path_type=Path), default=None,
              help="Workloads JSONL (contest trace lines) instead of the official set.")
@click.option("--trials", type=int, default=3, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--cpu-gate", is_flag=True, help="Without a GPU, gate the torch fallback on the CPU.")
@click.option("--compile-check", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.option("--templates-root", type=click.Path(path_type=Path), default=None)
@click.option("--policy", type=click.Path(path_type=Path), default=None)
def mcp(run_dir, agent, workloads, workloads_file, trials, seed, cpu_gate, compile_check, templates_root, policy):
    """Serve the SDK's gated kernel tools to an external coding agent over MCP (stdio)."""
    from .. import render
    from .loop import RunConfig
    from .service import AgentService

    keys = [k.strip() for value in workloads for k in value.split(",") if k.strip()]
    config = RunConfig(run_dir=run_dir, workloads=keys, workloads_file=workloads_file, trials=trials, seed=seed,
                       cpu_gate=cpu_gate,
                       compile_check=compile_check, templates_root=templates_root or render.TEMPLATES, policy=policy,
                       backend=f"mcp:{agent}")
    try:
        server = build_server(AgentService(run_dir, config=config, agent=agent))
    except BadInputError as exc:
        raise click.ClickException(str(exc)) from None
    server.run("stdio")

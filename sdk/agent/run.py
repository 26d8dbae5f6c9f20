"""One-call entry for the agent loop (e.g. on the GPU machine):

    python -m sdk.agent.run --definition dsa_topk_indexer_fp8_h64_d128_topk2048_ps64 --max-iters 4 \
        --workloads 30cecff1,7f03b670,5db1b172 --trials 2 --budget-wall-s 170 --run-dir $OUT/agentrun

Gates and times every candidate where a GPU and sdk.gate exist (one gate call per candidate: build, trials,
CUPTI timing), promotes the best PASSED one into RUN/promoted/ (or --promote-to), prints a summary and writes the
whole run folder. The wall budget is checked before each model call, so the last candidate may finish after it.
"""
from __future__ import annotations

import click

from ..errors import BadInputError
from .commands import build_config, loop_options, run_and_report


@click.command("agent-run")
@click.option("--definition", "definitions", multiple=True, help="Definition id (repeat; default all).")
@loop_options
def main(definitions, **opts):
    try:
        run_and_report(build_config(list(definitions), opts))
    except BadInputError as exc:
        raise click.ClickException(str(exc)) from None


if __name__ == "__main__":
    main()

"""Agent loop behind `regenerate`, and the same tools for external agents behind `fib-sdk mcp`.

Roles (planner, coder, profiler, evaluator, researcher) are Jinja prompts with skills injected on demand; the coder
works through tools (sdk.agent.tools: read, patch, render, compile, gate, bench, profile, finish) over function
calling, several candidates in flight on a frontier of the best accepted ones. Backends: offline (a seeded
template search that answers in the same tool calls), litellm (any hosted or OpenAI-compatible model), scripted
(fixed replies, no network) and replay (a recorded run's calls/). An append-only token ledger with OpenTelemetry
GenAI keys records every model call and tool run; candidates.jsonl is the lineage.

Every finished candidate goes through the same pipeline (sdk.agent.pipeline): static anti-hacking scan -> nvcc
compile check (sm_90a) -> correctness gate -> timing with the PyTorch reference -> decision. A latency only counts
after the gate passed; without a GPU the loop says what it could not do instead of inventing numbers.
"""

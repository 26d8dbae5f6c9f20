"""Agent loop behind `regenerate`: roles (planner, coder, profiler, evaluator, researcher) as Jinja prompts with
skills injected on demand, three backends (offline seeded template search, litellm, replay), an append-only token
ledger with OpenTelemetry GenAI keys, and per-run candidate lineage.

Every candidate goes through the same flow: static anti-hacking scan -> render -> nvcc compile check (sm_90a) ->
correctness gate -> bench -> optional profile -> evaluator decision. A latency only counts after the gate passed;
without a GPU the loop says what it could not do instead of inventing numbers.
"""

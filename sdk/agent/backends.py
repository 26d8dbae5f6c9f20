"""Model backends behind the roles. Each turns a rendered prompt (plus the structured context it was rendered
from) into a reply with normalised usage and cost.

- offline: no model. A deterministic, seeded template-parameter search answers every role from the context, in
  the same response format a model uses, so the loop, artifacts and ledger are identical. Usage is 0 tokens.
- litellm: any provider through `litellm.completion` (imported lazily, local cost map, explicit timeout, our own
  retry loop, never the proxy extra). A `completion` callable can be injected (tests use a scripted fake), and
  `mock_responses` feeds litellm's own `mock_response` one scripted reply per call.
- replay: returns the responses stored in a recorded run's `calls/`, role by role in recorded order, so the loop
  reproduces the same candidates byte for byte; it notes (does not fail on) prompts that differ, e.g. because
  timings differ on another machine.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..errors import BadInputError
from . import search
from .ledger import Usage, sha256

TRANSIENT = {"RateLimitError", "Timeout", "APITimeoutError", "APIConnectionError", "InternalServerError",
             "ServiceUnavailableError", "BadGatewayError", "TimeoutError", "ConnectionError"}
SYSTEM = ("You are one role in a GPU-kernel optimisation loop for FlashInfer-Bench contest kernels on an NVIDIA "
          "H200 (sm_90a). Follow the output contract at the end of the user message exactly.")


@dataclass
class Request:
    role: str
    phase: str
    prompt: str
    context: dict


@dataclass
class Reply:
    text: str
    usage: Usage
    provider: str
    model: str
    cost_usd: float | None
    cost_source: str
    response_model: str | None = None
    response_id: str | None = None
    finish_reasons: list | None = None
    retries: int = 0
    extra: dict = field(default_factory=dict)


class ModelCallError(RuntimeError):
    def __init__(self, message: str, error_type: str, retries: int):
        super().__init__(message)
        self.error_type, self.retries = error_type, retries


def fenced(payload: dict) -> str:
    return "```json\n" + json.dumps(payload, indent=1, sort_keys=True) + "\n```\n"


class OfflineBackend:
    name, provider, model = "offline", "offline", "offline/template-search"
    temperature = None

    def __init__(self, seed: int = 0):
        self.seed = seed

    def complete(self, request: Request) -> Reply:
        handler = getattr(self, f"_{request.role}")
        return Reply(text=handler(request.context), usage=Usage(), provider=self.provider, model=self.model,
                     cost_usd=0.0, cost_source="offline: no model call", response_model=self.model,
                     finish_reasons=["stop"])

    def _planner(self, ctx: dict) -> str:
        rng = search.rng_for(self.seed, ctx["definition"], ctx["iteration"], "planner")
        proposal = search.propose(ctx["space"], set(ctx["visited"]), ctx["base"], rng, defaults=ctx["defaults"],
                                  focus=ctx["focus"], pin=ctx["pin"], jump=ctx["jump"])
        if proposal is None:
            return "Every reachable point of the parameter space was visited.\n" + fenced(
                {"stop": "parameter space exhausted"})
        params, why = proposal
        return (f"Offline template search (seed {self.seed}), iteration {ctx['iteration']}: {why}.\n"
                + fenced({"parent": ctx["base_id"], "direction": why, "template": ctx["template"],
                          "params": params}))

    def _coder(self, ctx: dict) -> str:
        plan = ctx["plan"]
        return "Render the planned point of the template.\n" + fenced(
            {"template": plan["template"], "params": plan["params"]})

    def _profiler(self, ctx: dict) -> str:
        rows = ctx["bench"]
        slow = max(rows, key=lambda r: r["latency_ms"])
        lines = [f"- {r['workload'][:8]}: {r['latency_ms']:.4f} ms" for r in rows]
        regs = ", ".join(f"{k['kernel'][:40]}: {k['registers']} regs, {k['spill_bytes']} B spill"
                         for k in ctx["ptxas"]) or "no ptxas data"
        return ("Timing evidence (no ncu run by the offline profiler):\n" + "\n".join(lines)
                + f"\nStatic resources: {regs}\n"
                + fenced({"bottleneck": f"slowest workload {slow['workload']} at {slow['latency_ms']:.4f} ms",
                          "evidence": "bench rows", "slowest": slow["workload"]}))

    def _evaluator(self, ctx: dict) -> str:
        return "Decision by the evaluator's rules.\n" + fenced(ctx["rule_decision"])

    def _researcher(self, ctx: dict) -> str:
        return ("Local moves stopped paying off; jump to an unvisited region of the space.\n"
                + fenced({"jump": True, "note": f"after {ctx['trigger']}: try a distant parameter point"}))


def _get(obj, *path):
    for part in path:
        if obj is None:
            return None
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def normalize_usage(usage) -> Usage:
    """Provider usage -> OTel inclusive counts (input includes cache reads/creation, output includes reasoning)."""
    if usage is None:
        return Usage()
    if _get(usage, "prompt_tokens") is not None or _get(usage, "completion_tokens") is not None:
        return Usage(input_tokens=int(_get(usage, "prompt_tokens") or 0),
                     output_tokens=int(_get(usage, "completion_tokens") or 0),
                     cache_read=int(_get(usage, "prompt_tokens_details", "cached_tokens")
                                    or _get(usage, "cache_read_input_tokens") or 0),
                     cache_creation=int(_get(usage, "cache_creation_input_tokens") or 0),
                     reasoning=int(_get(usage, "completion_tokens_details", "reasoning_tokens") or 0))
    # Responses API / Anthropic-native shape; Anthropic's input_tokens excludes its cache tokens.
    read = _get(usage, "cache_read_input_tokens")
    creation = int(_get(usage, "cache_creation_input_tokens") or 0)
    base = int(_get(usage, "input_tokens") or 0)
    cached = int(read if read is not None else (_get(usage, "input_tokens_details", "cached_tokens") or 0))
    inclusive = base + cached + creation if read is not None else base
    reasoning = int(_get(usage, "output_tokens_details", "reasoning_tokens") or 0)
    return Usage(input_tokens=inclusive, output_tokens=int(_get(usage, "output_tokens") or 0), cache_read=cached,
                 cache_creation=creation, reasoning=reasoning)


def import_litellm():
    """Import litellm without its network cost-map fetch at import time (set before the first import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    try:
        import litellm
    except ImportError:
        raise BadInputError("the litellm backend needs litellm: pip install 'fib-contest-sdk[agent]' "
                            "(litellm>=1.83, never 1.82.7/1.82.8, never the [proxy] extra)") from None
    litellm.suppress_debug_info = True
    return litellm


class LiteLLMBackend:
    name, provider = "litellm", "litellm"

    def __init__(self, model: str, *, completion: Callable | None = None, timeout_s: float = 180.0,
                 max_retries: int = 3, backoff_s: float = 2.0, temperature: float | None = 0.2,
                 seed: int | None = None, max_tokens: int | None = None, api_base: str | None = None,
                 mock_responses: list | None = None, prices: tuple[float, float] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        if not model:
            raise BadInputError("the litellm backend needs --model (e.g. anthropic/claude-..., openai/gpt-...)")
        self.model, self.timeout_s, self.max_retries, self.backoff_s = model, timeout_s, max_retries, backoff_s
        self.temperature, self.seed, self.max_tokens, self.api_base = temperature, seed, max_tokens, api_base
        self.prices, self.sleep, self._completion, self._litellm = prices, sleep, completion, None
        self._mocks: Iterator | None = iter(mock_responses) if mock_responses is not None else None

    def _call(self) -> Callable:
        if self._completion is None:
            self._litellm = import_litellm()
            self._completion = self._litellm.completion
        return self._completion

    def complete(self, request: Request) -> Reply:
        kwargs = {"model": self.model, "timeout": self.timeout_s,
                  "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": request.prompt}]}
        for name in ("temperature", "seed", "max_tokens", "api_base"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        if self._mocks is not None:
            try:
                kwargs["mock_response"] = next(self._mocks)
            except StopIteration:
                raise ModelCallError("scripted mock responses ran out", "MockExhausted", 0) from None
        completion = self._call()
        if self._litellm is not None:
            kwargs["drop_params"] = True  # providers that reject seed/temperature get them dropped, not an error
        retries = 0
        while True:
            try:
                response = completion(**kwargs)
                break
            except Exception as exc:  # classified by name: litellm's and the fakes' exception types alike
                kind = type(exc).__name__
                if kind in TRANSIENT and retries < self.max_retries:
                    self.sleep(self.backoff_s * 2 ** retries)
                    retries += 1
                    continue
                raise ModelCallError(f"{kind}: {exc}", kind, retries) from exc
        text = _get(response, "choices")[0]
        content = _get(text, "message", "content") or ""
        usage = normalize_usage(_get(response, "usage"))
        cost, source = self._cost(response, usage)
        return Reply(text=content, usage=usage, provider=self._provider(), model=self.model, cost_usd=cost,
                     cost_source=source, response_model=_get(response, "model"), response_id=_get(response, "id"),
                     finish_reasons=[_get(text, "finish_reason") or "stop"], retries=retries)

    def _provider(self) -> str:
        return self.model.split("/", 1)[0] if "/" in self.model else "openai"

    def _cost(self, response, usage: Usage) -> tuple[float | None, str]:
        hidden = _get(response, "_hidden_params") or {}
        if isinstance(hidden, dict) and hidden.get("response_cost") is not None:
            return float(hidden["response_cost"]), "litellm.response_cost"
        if self.prices:
            return usage.input_tokens * self.prices[0] + usage.output_tokens * self.prices[1], "custom_price"
        if self._litellm is not None:
            try:
                return float(self._litellm.completion_cost(completion_response=response)), "litellm.completion_cost"
            except Exception:
                pass
        return None, "unmapped"


class ReplayBackend:
    """Serves each role from its own queue of recorded responses, in recorded order. Planner and coder replies
    fix the candidates, so a replay reproduces them even where gating or timing differs (a CPU replay of a GPU run
    simply leaves the recorded profiler/evaluator replies unused)."""
    name, provider = "replay", "replay"
    temperature = None

    def __init__(self, recorded_run: str | Path):
        folder = Path(recorded_run) / "calls"
        entries = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
        if not entries:
            raise BadInputError(f"{recorded_run}: no recorded calls to replay (calls/ is empty or missing)")
        self.queues: dict[str, list] = {}
        for entry in entries:
            self.queues.setdefault(entry["role"], []).append(entry)
        self.model = entries[0].get("model", "replay")

    def complete(self, request: Request) -> Reply:
        queue = self.queues.get(request.role, [])
        if not queue:
            raise ModelCallError(f"the recorded run has no more {request.role} calls", "ReplayExhausted", 0)
        entry = queue.pop(0)
        if entry.get("error.type"):
            raise ModelCallError(f"recorded call {entry['seq']} failed with {entry['error.type']}",
                                 entry["error.type"], 0)
        self.model = entry.get("model", self.model)
        return Reply(text=entry["response"], usage=Usage(), provider=self.provider, model=self.model, cost_usd=0.0,
                     cost_source="replay: no model call", response_model=entry.get("model"),
                     extra={"fib_sdk.replay_of": entry["seq"],
                            "fib_sdk.replay_prompt_match": sha256(entry["prompt"]) == sha256(request.prompt)})

"""Model backends behind the roles. Each turns a request (a rendered prompt, or a whole conversation plus the tool
specs the model may call) into a reply with normalised usage, cost and tool calls.

- offline: no model. A deterministic, seeded template-parameter search answers every role from the context, in
  the same response format a model uses (the coder answers with render_template + finish tool calls), so the
  loop, artifacts and ledger are identical. Usage is 0 tokens.
- litellm: any provider through `litellm.completion` (imported lazily, local cost map, never the proxy extra),
  with OpenAI function calling. Retries happen in one place, here: the provider client's own retries are off
  (`max_retries=0`, `num_retries=0`), and `timeout_s` is a deadline for the whole call, retries and back-off
  included. A `completion` callable can be injected (tests use scripted fakes).
- scripted: the litellm backend's code path over an in-process script (`sdk.agent.script`), no litellm and no
  network needed: what a GPU machine without internet runs to exercise the tools on a real kernel.
- replay: returns the replies stored in a recorded run's `calls/`, per (role, candidate) in recorded order, so the
  loop reproduces the same candidates even when several ran concurrently; it notes (does not fail on) prompts
  that differ, e.g. because timings differ on another machine.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import BadInputError
from . import search
from .ledger import Usage, sha256
from .script import Script, ScriptExhausted, chars_of, completion_response

TRANSIENT = {"RateLimitError", "Timeout", "APITimeoutError", "APIConnectionError", "InternalServerError",
             "ServiceUnavailableError", "BadGatewayError", "TimeoutError", "ConnectionError"}
SYSTEM = ("You are one role in a GPU-kernel optimisation loop for FlashInfer-Bench contest kernels on an NVIDIA "
          "H200 (sm_90a). Follow the output contract at the end of the user message exactly.")


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str          # the JSON text exactly as the model sent it (may be malformed)

    def as_message(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Request:
    role: str
    phase: str
    prompt: str                         # the text the ledger hashes (a conversation: its canonical JSON)
    context: dict
    messages: list[dict] | None = None  # a multi-turn conversation (tool sessions); None: system + prompt
    tools: list[dict] | None = None     # OpenAI function specs the model may call
    candidate_id: str | None = None
    turn: int = 0
    max_tokens: int | None = None       # output cap for this call (the token budgets set it)

    def chat_messages(self) -> list[dict]:
        return self.messages or [{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.prompt}]


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
    tool_calls: list[ToolCall] = field(default_factory=list)

    def message(self) -> dict:
        """The assistant message to append to the conversation (providers reject one with neither text nor
        tool calls, so an empty reply is kept as a placeholder text)."""
        if not self.tool_calls:
            return {"role": "assistant", "content": self.text or "(empty reply)"}
        return {"role": "assistant", "content": self.text or None,
                "tool_calls": [c.as_message() for c in self.tool_calls]}


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
        calls: list[ToolCall] = []
        if request.role == "coder" and request.tools is not None:
            text, calls = self._coder_tools(request)
        else:
            text = getattr(self, f"_{request.role}")(request.context)
        return Reply(text=text, usage=Usage(), provider=self.provider, model=self.model, cost_usd=0.0,
                     cost_source="offline: no model call", response_model=self.model,
                     finish_reasons=["tool_calls" if calls else "stop"], tool_calls=calls)

    def _planner(self, ctx: dict) -> str:
        rng = search.rng_for(self.seed, ctx["definition"], ctx["iteration"], "planner", ctx.get("slot", 0))
        proposal = search.propose(ctx["space"], set(ctx["visited"]), ctx["base"], rng, defaults=ctx["defaults"],
                                  focus=ctx["focus"], pin=ctx["pin"], jump=ctx["jump"])
        if proposal is None:
            return "Every reachable point of the parameter space was visited.\n" + fenced(
                {"stop": "parameter space exhausted"})
        params, why = proposal
        return (f"Offline template search (seed {self.seed}), iteration {ctx['iteration']}: {why}.\n"
                + fenced({"parent": ctx["base_id"], "direction": why, "template": ctx["template"],
                          "params": params}))

    def _coder_tools(self, request: Request) -> tuple[str, list[ToolCall]]:
        """Render the planned point, then finish: the same tools a model would call, in one reply."""
        plan = request.context.get("plan") or {}
        cid = request.candidate_id or "c"
        if request.turn > 0:  # only reached if the first reply was refused: end politely
            return "Nothing more to do.", [ToolCall(f"{cid}-finish", "finish", json.dumps(
                {"summary": "offline: rendered the planned template point"}))]
        return "Render the planned point of the template.", [
            ToolCall(f"{cid}-render", "render_template", json.dumps({"params": plan.get("params") or {}},
                                                                    sort_keys=True)),
            ToolCall(f"{cid}-finish", "finish", json.dumps({"summary": "offline: rendered the planned template "
                                                                       "point"}))]

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


def _tool_calls(message) -> list[ToolCall]:
    out = []
    for index, call in enumerate(_get(message, "tool_calls") or []):
        arguments = _get(call, "function", "arguments")
        out.append(ToolCall(id=str(_get(call, "id") or f"call-{index}"), name=str(_get(call, "function", "name")),
                            arguments=arguments if isinstance(arguments, str) else json.dumps(arguments or {})))
    return out


class LiteLLMBackend:
    name, provider = "litellm", "litellm"

    def __init__(self, model: str, *, completion: Callable | None = None, timeout_s: float = 180.0,
                 max_retries: int = 3, backoff_s: float = 2.0, temperature: float | None = 0.2,
                 seed: int | None = None, max_tokens: int | None = None, api_base: str | None = None,
                 api_key: str | None = None, prices: tuple[float, float] | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        if not model:
            raise BadInputError("the litellm backend needs --model (e.g. anthropic/claude-..., openai/gpt-...)")
        self.model, self.timeout_s, self.max_retries, self.backoff_s = model, timeout_s, max_retries, backoff_s
        self.temperature, self.seed, self.max_tokens, self.api_base = temperature, seed, max_tokens, api_base
        if api_key is None and api_base and model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            api_key = os.environ.get("FIB_SDK_API_KEY") or "no-key"  # local OpenAI-compatible servers want one
        self.api_key = api_key
        self.prices, self.sleep, self.clock, self._completion, self._litellm = prices, sleep, clock, completion, None

    def _call(self) -> Callable:
        if self._completion is None:
            self._litellm = import_litellm()
            self._completion = self._litellm.completion
        return self._completion

    def _kwargs(self, request: Request) -> dict:
        kwargs = {"model": self.model, "messages": request.chat_messages()}
        if request.tools:
            kwargs["tools"] = request.tools
            kwargs["tool_choice"] = "auto"
        max_tokens = request.max_tokens if request.max_tokens is not None else self.max_tokens
        for name, value in (("temperature", self.temperature), ("seed", self.seed), ("max_tokens", max_tokens),
                            ("api_base", self.api_base), ("api_key", self.api_key)):
            if value is not None:
                kwargs[name] = value
        return kwargs

    def complete(self, request: Request) -> Reply:
        kwargs = self._kwargs(request)
        completion = self._call()
        if self._litellm is not None:
            # providers that reject seed/temperature get them dropped; the client itself never retries (we do)
            kwargs.update(drop_params=True, max_retries=0, num_retries=0)
        deadline = self.clock() + self.timeout_s
        retries = 0
        while True:
            left = deadline - self.clock()
            if left <= 0:
                raise ModelCallError(f"Timeout: no reply within the {self.timeout_s:g} s call deadline "
                                     f"({retries} retries)", "Timeout", retries)
            kwargs["timeout"] = left
            try:
                response = completion(**kwargs)
                break
            except Exception as exc:  # classified by name: litellm's and the fakes' exception types alike
                kind = type(exc).__name__
                wait = self.backoff_s * 2 ** retries
                if kind in TRANSIENT and retries < self.max_retries and self.clock() + wait < deadline:
                    self.sleep(wait)
                    retries += 1
                    continue
                raise ModelCallError(f"{kind}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
                                     kind, retries) from exc
        choice = (_get(response, "choices") or [None])[0]
        message = _get(choice, "message")
        content = _get(message, "content") or ""
        usage = normalize_usage(_get(response, "usage"))
        cost, source = self._cost(response, usage)
        return Reply(text=content, usage=usage, provider=self._provider(), model=self.model, cost_usd=cost,
                     cost_source=source, response_model=_get(response, "model"), response_id=_get(response, "id"),
                     finish_reasons=[_get(choice, "finish_reason") or "stop"], retries=retries,
                     tool_calls=_tool_calls(message))

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


class _ScriptCompletion:
    """A `completion` callable over a Script: the same request/response shapes as a provider, in process."""

    def __init__(self, script: Script):
        self.script, self.count = script, 0

    def __call__(self, **kwargs):
        from .script import role_of

        messages = kwargs.get("messages") or []
        role = role_of(messages)
        try:
            entry = self.script.next(role)
        except ScriptExhausted as exc:
            raise ModelCallError(str(exc), "ScriptExhausted", 0) from None
        if entry.get("error"):
            raise ModelCallError(f"scripted error {entry['error']}", "ScriptedError", 0)
        self.count += 1
        return completion_response(entry, model=self.script.model, role=role, number=self.count,
                                   request_chars=chars_of(messages))


class ScriptedBackend(LiteLLMBackend):
    name = "scripted"

    def __init__(self, script: Script | str | Path, **kwargs):
        script = script if isinstance(script, Script) else Script.load(script)
        kwargs.setdefault("max_retries", 0)
        super().__init__(script.model, completion=_ScriptCompletion(script), temperature=None, **kwargs)
        self.script = script

    def complete(self, request: Request) -> Reply:
        try:
            return super().complete(request)
        except ModelCallError as exc:
            if isinstance(exc.__cause__, ModelCallError):
                raise exc.__cause__ from None
            raise

    def _provider(self) -> str:
        return "scripted"

    def _cost(self, response, usage: Usage) -> tuple[float | None, str]:
        return 0.0, "scripted: no provider"


class ReplayBackend:
    """Serves each (role, candidate) from its own queue of recorded replies, in recorded order. Planner and coder
    replies fix the candidates, so a replay reproduces them even where gating or timing differs (a CPU replay of a
    GPU run leaves the recorded profiler/evaluator replies of untimed candidates unused)."""
    name, provider = "replay", "replay"
    temperature = None

    def __init__(self, recorded_run: str | Path):
        folder = Path(recorded_run) / "calls"
        entries = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
        if not entries:
            raise BadInputError(f"{recorded_run}: no recorded calls to replay (calls/ is empty or missing)")
        self.queues: dict[tuple, list] = {}
        for entry in sorted(entries, key=lambda e: e["seq"]):
            self.queues.setdefault((entry["role"], entry.get("candidate_id")), []).append(entry)
        self.model = entries[0].get("model", "replay")

    def complete(self, request: Request) -> Reply:
        queue = self.queues.get((request.role, request.candidate_id), [])
        if not queue:
            raise ModelCallError(f"the recorded run has no more {request.role} calls for candidate "
                                 f"{request.candidate_id}", "ReplayExhausted", 0)
        entry = queue.pop(0)
        if entry.get("error.type"):
            raise ModelCallError(f"recorded call {entry['seq']} failed with {entry['error.type']}",
                                 entry["error.type"], 0)
        self.model = entry.get("model", self.model)
        message = entry.get("message") or {}
        recorded_sha = entry.get("prompt_sha256") or sha256(entry.get("prompt", ""))
        return Reply(text=entry["response"], usage=Usage(), provider=self.provider, model=self.model, cost_usd=0.0,
                     cost_source="replay: no model call", response_model=entry.get("model"),
                     tool_calls=_tool_calls(message),
                     extra={"fib_sdk.replay_of": entry["seq"],
                            "fib_sdk.replay_prompt_match": recorded_sha == sha256(request.prompt)})

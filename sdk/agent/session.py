"""A multi-turn tool session for one candidate: the model calls tools, each result goes back to it, until it calls
`finish` or a limit ends the candidate.

Limits are enforced before every call, never after: the turn count, the candidate's token budget and the run's
token budget (the next call's prompt is estimated at one token per 3 characters, a deliberate over-estimate for
code, and its output is capped with max_tokens to what is left), and the run's wall time. A malformed reply (no
tool call, an unknown tool, arguments that are not the declared JSON object) is answered with what was wrong and
re-asked once; a second malformed reply in a row ends the candidate with that reason.
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .backends import ModelCallError, Reply
from .tools import ToolArgumentError, ToolBox, openai_specs

CHARS_PER_TOKEN_ESTIMATE = 3
MIN_OUTPUT_TOKENS = 256


def estimate_tokens(messages: list[dict], tools: list[dict] | None = None) -> int:
    chars = len(json.dumps(messages, sort_keys=True)) + (len(json.dumps(tools, sort_keys=True)) if tools else 0)
    return math.ceil(chars / CHARS_PER_TOKEN_ESTIMATE)


class RunBudgetExhausted(Exception):
    """A run-level budget (tokens or wall time) ends this candidate and the work on the definition."""


@dataclass
class Budgets:
    """Run-level budgets shared by every call of the run; per-candidate ones live in SessionLimits.

    With several candidates in flight, a call reserves what it may use (its prompt estimate plus its output cap)
    until its usage is in the ledger, so concurrent calls cannot together overrun the run's token budget."""
    tokens_used: Callable[[str | None], int]
    run_tokens: int | None = None
    wall_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    max_output_tokens: int | None = 8192
    _reserved: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check_wall(self) -> None:
        elapsed = time.monotonic() - self.started
        if self.wall_s is not None and elapsed >= self.wall_s:
            raise RunBudgetExhausted(f"wall-time budget exhausted ({elapsed:.0f} s of {self.wall_s:.0f} s)")

    def allowance(self, estimate: int, candidate_id: str | None = None, candidate_tokens: int | None = None,
                  ) -> int | None:
        """The max_tokens for the next call (None: no cap), or raise when the call could overrun a budget."""
        ticket = object()
        cap = self.reserve(ticket, estimate, candidate_id, candidate_tokens)
        self.release(ticket)
        return cap

    def reserve(self, ticket, estimate: int, candidate_id: str | None = None, candidate_tokens: int | None = None,
                ) -> int | None:
        """Like allowance, and hold estimate + cap against the run budget until release(ticket)."""
        self.check_wall()
        with self._lock:
            cap = self.max_output_tokens
            in_flight = sum(self._reserved.values())
            for scope, budget, used in (("run", self.run_tokens, lambda: self.tokens_used(None) + in_flight),
                                        ("candidate", candidate_tokens, lambda: self.tokens_used(candidate_id))):
                if budget is None:
                    continue
                left = budget - used()
                if estimate + MIN_OUTPUT_TOKENS > left:
                    held = f", {in_flight} held by calls in flight" if scope == "run" and in_flight else ""
                    message = (f"{scope} token budget: the next call needs ~{estimate} prompt tokens (estimate) + "
                               f"{MIN_OUTPUT_TOKENS} output, {max(left, 0)} of {budget} left{held}")
                    raise (RunBudgetExhausted if scope == "run" else CandidateBudgetExhausted)(message)
                cap = min(cap, left - estimate) if cap is not None else left - estimate
            if self.run_tokens is not None:
                self._reserved[ticket] = estimate + (cap or 0)
            return cap

    def release(self, ticket) -> None:
        with self._lock:
            self._reserved.pop(ticket, None)


class CandidateBudgetExhausted(Exception):
    pass


@dataclass
class SessionLimits:
    max_turns: int = 12
    candidate_tokens: int | None = None


@dataclass
class SessionOutcome:
    reason: str
    turns: int = 0
    tool_calls: int = 0
    finished: bool = False
    stop_run: str | None = None      # set when a run-level budget or a failed model call ended it
    model_error: str | None = None


Caller = Callable[..., Reply]        # caller(messages, tools, turn, new_messages, max_tokens, estimate) -> Reply


class ToolSession:
    def __init__(self, caller: Caller, toolbox: ToolBox, system: str, user: str, limits: SessionLimits,
                 budgets: Budgets, tool_names: list[str] | None = None):
        self.caller, self.toolbox, self.limits, self.budgets = caller, toolbox, limits, budgets
        self.tools = openai_specs(tool_names)
        self.messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self.transcript: list[dict] = []

    def run(self) -> SessionOutcome:
        outcome = SessionOutcome(reason="")
        sent = 0          # messages already sent in an earlier call (the ledger stores only what is new)
        strikes = 0
        cid = self.toolbox.ws.id
        while True:
            if outcome.turns >= self.limits.max_turns:
                outcome.reason = f"turn budget reached ({self.limits.max_turns} model turns)"
                return outcome
            estimate = estimate_tokens(self.messages, self.tools)
            ticket = object()
            try:
                max_tokens = self.budgets.reserve(ticket, estimate, cid, self.limits.candidate_tokens)
            except RunBudgetExhausted as exc:
                outcome.reason, outcome.stop_run = str(exc), str(exc)
                return outcome
            except CandidateBudgetExhausted as exc:
                outcome.reason = str(exc)
                return outcome
            try:
                reply = self.caller(messages=list(self.messages), tools=self.tools, turn=outcome.turns,
                                    new_messages=self.messages[sent:], max_tokens=max_tokens, estimate=estimate)
            except ModelCallError as exc:
                outcome.reason = outcome.model_error = f"coder call failed: {exc}"
                outcome.stop_run = outcome.reason
                return outcome
            finally:
                self.budgets.release(ticket)  # the call's usage is in the ledger now (or it failed)
            outcome.turns += 1
            self.messages.append(reply.message())
            sent = len(self.messages)
            problem = None
            if not reply.tool_calls:
                problem = "the reply called no tool"
                self.messages.append({"role": "user", "content": (
                    "Your last reply called no tool. Work only through the tools: change the sources "
                    "(apply_patch or render_template), check them (compile, gate, bench) and call finish when "
                    "the candidate is ready.")})
            for call in reply.tool_calls:
                try:
                    result = self.toolbox.call(call.name, call.arguments, call.id)
                    content, ok = result.text, result.ok
                    outcome.tool_calls += 1
                except ToolArgumentError as exc:
                    problem, ok = str(exc), False
                    content = f"malformed call: {exc}. Send the arguments as the JSON object the tool declares."
                self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                      "content": content})
                self.transcript.append({"turn": outcome.turns, "tool": call.name, "ok": ok,
                                        "result": content.splitlines()[0][:200] if content else ""})
                if self.toolbox.ws.finished is not None:
                    outcome.reason, outcome.finished = f"finished: {self.toolbox.ws.finished}", True
                    return outcome
            if problem is None:
                strikes = 0
                continue
            strikes += 1
            if strikes >= 2:
                outcome.reason = f"malformed reply twice in a row ({problem})"
                return outcome

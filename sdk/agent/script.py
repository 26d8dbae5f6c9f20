"""Scripted model replies: what `--backend scripted` and the local OpenAI-compatible stub (`script_server`) serve.

A script is JSON: {"model": "scripted/<name>", "replies": {"planner": [...], "coder": [...], ...}}. Each role has
its own queue, served in order, so the order in which roles ask does not matter (the role is read from the
prompt's "Role: <name>" line). A reply is
    {"content": "text"}                                          plain text (a ```json block for the text roles)
    {"tool_calls": [{"name": "apply_patch", "arguments": {...}}]}  function calls (content optional)
    {"error": {"status": 429, "message": "slow down"}}           an HTTP error (the stub only)
    {"delay_s": 3.0, ...}                                        answer late (timeouts)
with an optional "usage": {"prompt_tokens": N, "completion_tokens": M}. Without one, usage is counted as one
token per 4 characters of the request's messages and of the reply, so totals are deterministic for fixed prompts.
"""
from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path

from ..errors import BadInputError

ROLE = re.compile(r"Role: (\w+)")


class ScriptExhausted(RuntimeError):
    pass


def role_of(messages: list[dict]) -> str:
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and (match := ROLE.search(content)):
            return match.group(1)
    return "unknown"


def chars_of(messages: list[dict]) -> int:
    return sum(len(json.dumps(m, sort_keys=True)) for m in messages)


class Script:
    def __init__(self, data: dict, source: str = "<inline>"):
        replies = data.get("replies") if isinstance(data, dict) else None
        if not isinstance(replies, dict) or not all(isinstance(v, list) for v in replies.values()):
            raise BadInputError(f"{source}: a script is {{\"model\": ..., \"replies\": {{role: [reply, ...]}}}}")
        self.model = str(data.get("model") or "scripted/model")
        self.source = source
        self.queues = {role: list(items) for role, items in replies.items()}
        self.served: dict[str, int] = {role: 0 for role in replies}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path) -> "Script":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise BadInputError(f"{path}: cannot read the script ({exc})") from None
        return cls(data, str(path))

    def next(self, role: str) -> dict:
        with self._lock:
            queue = self.queues.get(role) or []
            if not queue:
                raise ScriptExhausted(f"the script has no more {role} replies ({self.served.get(role, 0)} served)")
            self.served[role] = self.served.get(role, 0) + 1
            return queue.pop(0)


def tool_calls_of(entry: dict, prefix: str) -> list[dict]:
    """OpenAI-shaped tool calls of a scripted reply (arguments as a JSON string, as providers send them)."""
    out = []
    for index, call in enumerate(entry.get("tool_calls") or []):
        arguments = call.get("arguments", {})
        out.append({"id": call.get("id") or f"{prefix}-{index}", "type": "function",
                    "function": {"name": call["name"],
                                 "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}})
    return out


def usage_of(entry: dict, request_chars: int) -> dict:
    usage = entry.get("usage")
    if usage:
        prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        out = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        for key in ("prompt_tokens_details", "completion_tokens_details"):
            if key in usage:
                out[key] = usage[key]
        return out
    reply_chars = len(entry.get("content") or "") + len(json.dumps(entry.get("tool_calls") or []))
    prompt, completion = math.ceil(request_chars / 4), math.ceil(reply_chars / 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_response(entry: dict, *, model: str, role: str, number: int, request_chars: int) -> dict:
    """The chat.completion object for one scripted reply."""
    calls = tool_calls_of(entry, f"call-{role}-{number}")
    message = {"role": "assistant", "content": entry.get("content")}
    if calls:
        message["tool_calls"] = calls
    return {"id": f"scripted-{role}-{number}", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
            "usage": usage_of(entry, request_chars)}

"""Runtime guards: process-wide state that a solution must leave as it found it.

The worker calls `arm()` before it imports the solution; `tampered()` then names every watched function or class
that was replaced since (monkey-patched timers, synchronize, events, the checker's own torch functions) and every
torch numerics setting that changed (TF32, matmul precision, default dtype), since those would change the
reference's results too. `live_threads()` counts Python threads so that work left running on a thread after the
call returns is caught. Unarmed (in-process tests), `tampered()` reports nothing.
"""
from __future__ import annotations

import builtins
import contextlib
import json
import math
import os
import statistics
import tempfile
import threading
import time
import warnings

import torch
import torch.profiler

_BASELINE: dict[str, object] | None = None
STRICT = ("time.", "builtins.", "torch.cuda.", "json.", "os.", "statistics.", "tempfile.", "threading.")  # timers, synchronize, events: never rewrapped legitimately


def _namespaces() -> dict[str, object]:
    spaces = {"time": time, "builtins": builtins, "math": math, "json": json, "os": os, "statistics": statistics,
              "tempfile": tempfile, "threading": threading, "torch": torch, "torch.Tensor": torch.Tensor,
              "torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event, "torch.linalg": torch.linalg,
              "torch.nn.functional": torch.nn.functional, "torch.autograd.profiler": torch.autograd.profiler,
              "torch.profiler": torch.profiler, "torch.profiler.profile": torch.profiler.profile,
              "torch.profiler.record_function": torch.profiler.record_function}
    return spaces


def _settings() -> dict[str, object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # newer torch deprecates the allow_tf32 getters in favour of fp32_precision
        values = {"torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
                  "torch.get_default_dtype()": torch.get_default_dtype(),
                  "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled()}
        for name in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
            with contextlib.suppress(AttributeError, RuntimeError):  # absent or unreadable in this torch build
                values[f"torch.backends.cuda.matmul.{name}"] = getattr(torch.backends.cuda.matmul, name)
        with contextlib.suppress(AttributeError, RuntimeError):
            values["torch.backends.cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
    return values


def snapshot() -> dict[str, object]:
    """Every callable of the watched namespaces (by identity) and the numerics settings (by value)."""
    state: dict[str, object] = {}
    for prefix, space in _namespaces().items():
        for name, value in list(vars(space).items()):
            if callable(value) and not isinstance(value, type(torch)):  # submodules appear lazily: not watched
                state[f"{prefix}.{name}"] = value
    state.update(_settings())
    return state


def arm() -> None:
    global _BASELINE
    _BASELINE = snapshot()


def tampered() -> list[str]:
    """Watched names whose object (or setting's value) differs from the armed baseline, sorted."""
    if _BASELINE is None:
        return []
    now = snapshot()
    changed = []
    for name, before in _BASELINE.items():
        after = now.get(name, _missing)
        same = (after is before or _torch_rewrap(name, before, after)) if callable(before) else after == before
        if not same:
            changed.append(name)
    return sorted(changed)


def _torch_rewrap(name: str, before: object, after: object) -> bool:
    """torch wraps some of its own functions when a submodule is first imported (torch._dynamo wraps
    torch.manual_seed with functools.wraps); allowed for torch's own namespaces, never for timers or sync."""
    if name.startswith(STRICT):
        return False
    while (after := getattr(after, "__wrapped__", None)) is not None:
        if after is before:
            return True
    return False


def _missing() -> None:  # sentinel: a watched name that was deleted
    return None


def live_threads() -> int:
    return threading.active_count()


def describe(names: list[str]) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"the solution replaced or changed {shown} (monkey-patching / global settings are not allowed)"

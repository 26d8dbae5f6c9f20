"""Deterministic, seeded walk over a template's declared parameter space (the offline planner's brain).

From the current base point (the best gated candidate, or the latest one that compiled) it proposes an unvisited
one-step neighbour (one parameter moved to an adjacent allowed value); with none left, or when asked to jump, an
unvisited random point. Every choice comes from a `random.Random` seeded by (seed, definition, iteration), so the
same inputs give the same sequence of candidates on any machine.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import random

ENUMERATE_LIMIT = 200_000


def key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def rng_for(seed: int, *parts) -> random.Random:
    text = ":".join(str(p) for p in (seed, *parts))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))


def start_point(space: dict, defaults: dict | None = None, pin: dict | None = None) -> dict:
    point = {name: values[0] for name, values in space.items()}
    for name, value in (defaults or {}).items():
        if name in space and value in space[name]:
            point[name] = value
    for name, value in (pin or {}).items():
        if name in space and value in space[name]:
            point[name] = value
    return point


def neighbours(space: dict, base: dict, focus: list | None = None, pin: dict | None = None) -> list[tuple[dict, str]]:
    out = []
    for name in sorted(space):
        if (focus and name not in focus) or (pin and name in pin):
            continue
        values = space[name]
        index = values.index(base[name])
        for step in (-1, 1):
            if 0 <= index + step < len(values):
                moved = dict(base, **{name: values[index + step]})
                out.append((moved, f"{name} {base[name]!r} -> {values[index + step]!r}"))
    return out


def _random_unvisited(space: dict, visited: set, rng: random.Random, pin: dict | None) -> dict | None:
    names = sorted(space)
    choices = {n: ([pin[n]] if pin and n in pin and pin[n] in space[n] else space[n]) for n in names}
    for _ in range(256):
        point = {n: rng.choice(choices[n]) for n in names}
        if key(point) not in visited:
            return point
    if math.prod(len(v) for v in choices.values()) > ENUMERATE_LIMIT:
        return None
    remaining = [dict(zip(names, combo)) for combo in itertools.product(*(choices[n] for n in names))
                 if key(dict(zip(names, combo))) not in visited]
    return rng.choice(remaining) if remaining else None


def propose(space: dict, visited: set, base: dict | None, rng: random.Random, *, defaults: dict | None = None,
            focus: list | None = None, pin: dict | None = None, jump: bool = False) -> tuple[dict, str] | None:
    """(params, move description), or None when every reachable point was visited."""
    first = start_point(space, defaults, pin)
    if key(first) not in visited:
        return first, "seed point (template defaults)"
    if base is not None and not jump:
        base = dict(base, **{k: v for k, v in (pin or {}).items() if k in space and v in space[k]})
        fresh = [(p, why) for p, why in neighbours(space, base, focus, pin) if key(p) not in visited]
        if fresh:
            return rng.choice(fresh)
    point = _random_unvisited(space, visited, rng, pin)
    return (point, "jump to an unvisited point" + (" (researcher)" if jump else " (neighbourhood exhausted)")) \
        if point else None

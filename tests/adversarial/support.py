"""Shared by the adversarial and isolation tests: the hostile packages, tiny workloads, one gate call."""
from __future__ import annotations

from pathlib import Path

from sdk import solutions
from sdk.gate import CallPlan, GateResult, gate_solution
from tests.helpers import small_attention, small_indexer

HERE = Path(__file__).resolve().parent
# A cheap timing plan: the same calls as gating, more of them, a few checked at random (wall clock on CPU).
TIMING = CallPlan(trials=2, warmup=1, iters=4, checks=2)


def package(name: str) -> solutions.SolutionPackage:
    return solutions.load_package(HERE / name)


def tiny_indexer(uuid: str = "tiny-indexer"):
    """Two rows, the longer one past 2048 tokens, so the top-k selection really selects."""
    return small_indexer(uuid, batch_size=2, max_num_pages=33, num_pages=80)


def long_indexer(uuid: str = "long-indexer"):
    """Two rows, the longer one near twice top-k: keys that went stale change about half of its selection (a row
    barely past 2048 tokens changes in a few tail tokens, close enough in value to pass the rescoring tolerance)."""
    return small_indexer(uuid, batch_size=2, max_num_pages=64, num_pages=160)


def tiny_attention(num_tokens: int = 1, uuid: str | None = None):
    """16 pages: each query row gets 1024 valid indices and 1024 padding slots."""
    return small_attention(uuid or f"tiny-attention-{num_tokens}", num_tokens=num_tokens, num_pages=16)


def tiny_workload(definition: str):
    return tiny_indexer() if "indexer" in definition else tiny_attention()


def gate(name: str, workloads=None, *, trials: int = 2, device: str = "cpu", **kw) -> list[GateResult]:
    """The real gate (own worker process, static scan unless scan=False) on a hostile package."""
    solution = package(name).solution
    workloads = workloads or [tiny_workload(solution.definition)]
    return gate_solution(solution, solution.definition, workloads, trials=trials, device=device, **kw)


def scan_rules(name: str) -> set[str]:
    from sdk.gate.scan import scan

    return {f.rule for f in scan(package(name))}

"""What one bench run does, as one typed value (the CLI, `nox -s bench`/`repro` and the remote runner build it)."""
from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from ..gate.plan import CallPlan


class BenchConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    trials: int = Field(3, ge=1)
    warmup: int = Field(10, ge=0)
    iters: int = Field(50, ge=1)
    budget_ms: float | None = Field(100.0, gt=0, description="timed wall time per trial and callable that sizes iters "
                                    "(slow calls get fewer, at least min_iters); None: always iters")
    min_iters: int = Field(10, ge=1)
    checks: int = Field(3, ge=0, description="checked calls per trial besides the first, chosen after each call")
    seed: int | None = Field(None, description="None: drawn from the OS and recorded")
    keys: list[str] = Field(default_factory=list, description="workload uuid prefixes; empty: all")
    stride: int = Field(1, ge=1)
    reference: bool = True
    reference_iters: int = Field(10, ge=1, description="timed calls of the (slow) reference per trial")
    interleave_reference: bool = Field(True, description="the reference timed between each solution trial, in the "
                                       "judge's process (one device; False, or several: after the solutions, once "
                                       "per workload)")
    peers: bool = True
    peer_filter: list[str] = Field(default_factory=list)
    peer_draws: int = Field(8, ge=1, description="fresh draws per trial that a peer's timed calls cycle through: the "
                            "solutions see a new draw every call, so a peer timed on one draw per trial would carry "
                            "that draw's routing (MoE: 0 or 2 local experts at T = 1) into its latency")
    timeout_s: float = Field(600.0, gt=0)
    compile_budget_s: float = Field(600.0, ge=0, description="extra seconds for a worker's first workload (build)")
    baseline_every: int = Field(1, ge=1, description="time the reference and peers on every Nth workload")

    def plan(self, device: str) -> CallPlan:
        return CallPlan(trials=self.trials, warmup=self.warmup, iters=self.iters, checks=self.checks,
                        budget_ms=self.budget_ms, min_iters=self.min_iters, profile=torch.device(device).type == "cuda")

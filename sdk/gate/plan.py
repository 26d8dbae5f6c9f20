"""What the judge does per workload: how many trials, how many calls each, how many of them it checks.

Gating alone is `CallPlan(trials=3)`: one call per trial, every call checked (the contest's three trials). Timing is
the same calls, more of them: `warmup + iters` per trial with the profiler on for the whole trial, the first call
of each trial and about `checks` more, chosen after each call, checked against the reference. There is no other
kind of call. With `budget_ms`, a trial's number of calls follows the call's own wall time (measured on the trial's
second call, the first may pay lazy initialisation): as many timed calls as fit the budget, at least `min_iters`, at
most `iters`, as triton's do_bench sizes its repetitions; fast kernels keep all `iters`, a 15 ms host-bound baseline
gets `min_iters` instead of paying the profiler for 60 calls per trial. The two calls a trial is sized on are never
timed, and the second one's check is drawn at the sized trial's rate (a solution sets its trial's length with its
own wall time, so those calls must not be the ones that count).
"""
from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field


def sized_iters(call_ms: float, iters: int, budget_ms: float | None, min_iters: int) -> int:
    """Timed calls of a call taking `call_ms`: as many as fit `budget_ms`, within [min(min_iters, iters), iters]."""
    if budget_ms is None or call_ms <= 0:
        return iters
    return max(min(min_iters, iters), min(iters, math.ceil(budget_ms / call_ms)))


class CallPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    trials: int = Field(3, ge=1)
    warmup: int = Field(0, ge=0)
    iters: int = Field(1, ge=1)
    checks: int = Field(3, ge=0, description="expected checked calls per trial besides the first")
    profile: bool = Field(False, description="CUPTI trace around each trial (timing on a GPU)")
    sets: int | None = Field(None, ge=1, description="resident input sets to rotate (default: 2 on GPU, 1 on CPU)")
    budget_ms: float | None = Field(None, gt=0, description="timed wall time per trial that sizes iters (None: iters)")
    min_iters: int = Field(10, ge=1, description="timed calls per trial however slow the call (with budget_ms)")

    @property
    def timing(self) -> bool:
        return self.warmup + self.iters > 1 or self.profile

    @property
    def calls_per_trial(self) -> int:
        return self.warmup + self.iters if self.timing else 1

    @property
    def check_probability(self) -> float:
        return self.check_probability_for(self.calls_per_trial)

    def check_probability_for(self, calls: int) -> float:
        others = calls - 1
        return 1.0 if others <= 0 else min(1.0, self.checks / others)

    def sized(self, call_ms: float) -> tuple[int, int]:
        """(warmup, iters) of a trial whose calls take about `call_ms` of wall time each."""
        if self.budget_ms is None or not self.timing or call_ms <= 0:
            return self.warmup, self.iters
        iters = sized_iters(call_ms, self.iters, self.budget_ms, self.min_iters)
        warmup = max(2, min(self.warmup, math.ceil(self.warmup * iters / self.iters)))  # the 2 calls sized on
        return warmup, iters

    def resident_sets(self, device: torch.device) -> int:
        return self.sets or (2 if device.type == "cuda" else 1)

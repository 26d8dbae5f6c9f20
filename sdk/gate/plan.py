"""What the judge does per workload: how many trials, how many calls each, how many of them it checks.

Gating alone is `CallPlan(trials=3)`: one call per trial, every call checked (the contest's three trials). Timing is
the same calls, more of them: `warmup + iters` per trial with the profiler on for the whole trial, the first call
of each trial and about `checks` more, chosen after each call, checked against the reference. There is no other
kind of call.
"""
from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field


class CallPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    trials: int = Field(3, ge=1)
    warmup: int = Field(0, ge=0)
    iters: int = Field(1, ge=1)
    checks: int = Field(3, ge=0, description="expected checked calls per trial besides the first")
    profile: bool = Field(False, description="CUPTI trace around each trial (timing on a GPU)")
    sets: int | None = Field(None, ge=1, description="resident input sets to rotate (default: 2 on GPU, 1 on CPU)")

    @property
    def timing(self) -> bool:
        return self.warmup + self.iters > 1 or self.profile

    @property
    def calls_per_trial(self) -> int:
        return self.warmup + self.iters if self.timing else 1

    @property
    def check_probability(self) -> float:
        others = self.calls_per_trial - 1
        return 1.0 if others <= 0 else min(1.0, self.checks / others)

    def resident_sets(self, device: torch.device) -> int:
        return self.sets or (2 if device.type == "cuda" else 1)

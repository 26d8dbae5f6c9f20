"""The results file's row: one (solution, workload) as the bench measured it. Report, scoring, merge and submit
read rows through this model (files of schema /1 still load: their rows lack the newer fields)."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

SCHEMA = "fib-sdk.results/2"
READABLE = ("fib-sdk.results/1", SCHEMA)


class ResultRow(BaseModel):
    model_config = ConfigDict(extra="allow")  # later fields (bounds, probes) ride along

    definition: str
    solution: str
    workload: str
    status: str
    solution_hash: str | None = None
    axes: dict[str, Any] = {}
    reason: str | None = ""
    strict_passed: bool | None = None     # the strict verdict beside the contest status (None: older files)
    strict_reason: str = ""
    seed: int | None = None
    latency_ms: float | None = None       # mean over trials of the median per trial
    latency_trials_ms: list[float] = []
    e2e_ms: float | None = None           # median wall clock of a call in the worker, device-synchronised
    # Median host time until the call returned, before the device sync (its launches enqueued, and whatever the call
    # did on the host before its first launch, which no span includes).
    host_ms: float | None = None
    # Median over the timed calls of the GPU time inside the span when none of the call's device work ran: the
    # gaps between its launches. The judge syncs before each call, so a gap is the GPU waiting for the host's next
    # launch (launch-bound: fewer launches help, faster kernels do not). None: CPU rows, older files.
    idle_ms: float | None = None
    timing_method: str | None = None
    timer_fallback: bool = False          # True when the timing is not the CUPTI span (labelled, never silent)
    timed_calls: int | None = None
    checked_calls: int | None = None      # calls whose outputs were checked against the reference
    setup_ms: list[float] = []            # a solution's setup(), timed apart
    gate_s: float | None = None           # the judge's wall time for this workload (gate overhead included)
    device: str | None = None             # the GPU that gated and timed it (its reference, peers and probe too)
    reference_latency_ms: float | None = None   # the reference the gate graded against (`reference_source`)
    reference_source: str | None = None        # "official" (a loaded FlashInfer-Bench definition) or "fib-sdk"
    reference_trials_ms: list[float] = []
    reference_aa_pct: float | None = None      # spread of the reference's trial medians, % of their mean
    references_ms: dict[str, float] = {}       # every reference timed in the run, by source
    reference_timing: str | None = None        # "interleaved" (between this solution's trials) or "after" (once per
                                               # workload, after the solutions); None: not timed
    reference_interleave_error: str | None = None  # why the interleaved reference timing stopped (then: "after")
    probe_ms: float | None = None              # CUPTI span of a launch that only reads the workload's bytes
    probe: dict = {}
    bound_ms: float | None = None              # max(probe_ms, FLOPs / measured matrix rate), per bound_basis
    bound_basis: str | None = None             # "timed calls" (each timed call's own work) or "baseline draws"
    bound_draws_ms: float | None = None        # the bound of the baseline's draws (one per trial)
    bound_trials_ms: list[float] = []          # timed calls: per trial the median of the calls' bounds
    aa_noise_pct: float | None = None
    aa_noise_median_pct: float | None = None
    within_noise_of_best_peer: bool | None = None
    work: dict | None = None
    floor_ms: float | None = None
    implausible: bool = False
    peers: dict[str, dict] = {}
    matched_ratio: float | None = None
    max_abs_error: float | str | None = None
    rel_l2: float | None = None
    declared_cache: str | None = None
    cold_latency_ms: float | None = None


def validate(row: dict) -> dict:
    """The row as the model reads it (raises pydantic.ValidationError on a malformed row)."""
    return ResultRow.model_validate(row).model_dump()

"""Physical floors: the bytes an op must move and the FLOPs it must do for one workload's concrete inputs.

A floor is a lower bound on latency: max(bytes / HBM bandwidth, FLOPs / matrix rate), with both ceilings measured
on the same GPU in the same run (`measure_ceilings`). Counts use the workload's real routing and lengths:

* MoE: only local experts that receive at least one token pay for their weights (routing is the reference's own
  `_route`, never a re-implementation); FLOPs are per (token, local expert) assignment, at the FP8 rate.
* Indexer: only the K-cache rows inside each row's `seq_len` are read, at the FP8 rate.
* Sparse attention: only the non-padding (`!= -1`) indices gather KV rows, at the bf16 rate.

Every input that must be read (scalars excepted) and every output that must be written is counted once; reads of
routing logits, queries and the like are not "free" even when they are small.
"""
from __future__ import annotations

import functools
import importlib
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Callable

import torch

from .. import definitions
from ..errors import BadInputError
from .timing import time_call

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"

INDEXER_TOPK = 2048


@dataclass(frozen=True)
class Work:
    bytes: int
    flops: int
    matrix: str  # which matrix rate bounds the FLOPs: "fp8" or "bf16"
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Ceilings:
    """Measured peaks; a rate that could not be measured is None (its reason in `notes`)."""

    hbm_bytes_per_s: float
    fp8_flops_per_s: float | None
    bf16_flops_per_s: float | None
    notes: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> "Ceilings":
        return cls(raw["hbm_bytes_per_s"], raw.get("fp8_flops_per_s"), raw.get("bf16_flops_per_s"),
                   dict(raw.get("notes") or {}))


def _nbytes(value: Any) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def row_nbytes(t: torch.Tensor) -> int:
    """Bytes of one entry of the leading dimension (a batch row)."""
    return _nbytes(t) // max(t.shape[0], 1)


# ---- MoE ---------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _moe_route() -> Callable:
    """The routing function of the reference the gate uses; the project's own `.py` when that text has none
    (an official dataset definition inlines its routing into `run`)."""
    module = ModuleType("fib_reference_routing")
    exec(compile(definitions.reference_source(MOE), f"<reference {MOE}>", "exec"), module.__dict__)
    route = getattr(module, "_route", None)
    return route or importlib.import_module(f"{definitions.__name__}.{MOE}")._route


def moe_work(inputs: dict) -> Work:
    w13, w13_scale = inputs["gemm1_weights"], inputs["gemm1_weights_scale"]
    w2, w2_scale = inputs["gemm2_weights"], inputs["gemm2_weights_scale"]
    n_local, two_i, hidden = w13.shape
    inter = w2.shape[2]
    tokens = inputs["hidden_states"].shape[0]

    experts, _ = _moe_route()(inputs["routing_logits"], inputs["routing_bias"], inputs["routed_scaling_factor"])
    local = experts.to(torch.long) - int(inputs["local_expert_offset"])
    local = local[(local >= 0) & (local < n_local)]
    per_expert = torch.bincount(local, minlength=n_local).tolist()
    active = sum(1 for n in per_expert if n > 0)
    assignments = sum(per_expert)

    # Per-expert slices: one expert's weights and block scales (meta tensors work: only shapes are read).
    expert_bytes = _nbytes(w13[0]) + _nbytes(w13_scale[0]) + _nbytes(w2[0]) + _nbytes(w2_scale[0])
    activation_bytes = sum(_nbytes(inputs[k]) for k in
                           ("hidden_states", "hidden_states_scale", "routing_logits", "routing_bias"))
    output_bytes = tokens * hidden * 2  # bf16
    flops = 2 * (two_i * hidden + hidden * inter) * assignments
    detail = {"tokens": tokens, "active_local_experts": active, "assignments": assignments,
              "tokens_per_local_expert": per_expert, "bytes_per_expert": expert_bytes,
              "weight_bytes": active * expert_bytes, "activation_bytes": activation_bytes,
              "output_bytes": output_bytes}
    return Work(active * expert_bytes + activation_bytes + output_bytes, flops, "fp8", detail)


# ---- DSA indexer -------------------------------------------------------------------------------------------------

def indexer_scored_rows(lens: torch.Tensor) -> torch.Tensor:
    """Rows that must be scored: a row of at most top-k tokens selects all of them, whatever their K or query."""
    return lens > INDEXER_TOPK


def indexer_work(inputs: dict) -> Work:
    q, cache, block_table = inputs["q_index_fp8"], inputs["k_index_cache_fp8"], inputs["block_table"]
    batch, heads, dim = q.shape
    page, row_bytes = cache.shape[1], cache.shape[-1] * cache.element_size()  # 132 B: 128 fp8 + one fp32 scale
    lens = inputs["seq_lens"].to(torch.long).clamp(0, block_table.shape[1] * page)
    scored = indexer_scored_rows(lens)
    tokens, rows = int(lens[scored].sum()), int(scored.sum())
    # Every row reads the block-table entries of the pages it uses (its output ids); only scored rows read K, q, w.
    used_pages = int(((lens + page - 1) // page).sum())
    parts = {"k_cache_bytes": tokens * row_bytes,
             "query_bytes": rows * row_nbytes(q),
             "weights_bytes": rows * row_nbytes(inputs["weights"]),
             "seq_lens_bytes": _nbytes(inputs["seq_lens"]),
             "block_table_bytes": used_pages * block_table.element_size(),
             "output_bytes": batch * INDEXER_TOPK * 4}
    flops = tokens * heads * dim * 2
    return Work(sum(parts.values()), flops, "fp8", {"batch": batch, "tokens_scored": tokens, "rows_scored": rows,
                                                     **parts})


# ---- DSA sparse attention ----------------------------------------------------------------------------------------

def attention_work(inputs: dict) -> Work:
    q_nope, q_pe, indices = inputs["q_nope"], inputs["q_pe"], inputs["sparse_indices"]
    rows, heads, ckv = q_nope.shape
    kpe = q_pe.shape[-1]
    elem = inputs["ckv_cache"].element_size()
    valid = int((indices != -1).sum())
    parts = {"kv_gather_bytes": valid * (ckv + kpe) * elem,
             "query_bytes": _nbytes(q_nope) + _nbytes(q_pe),
             "indices_bytes": _nbytes(indices),
             "output_bytes": rows * heads * ckv * 2 + rows * heads * 4}  # bf16 output + fp32 lse
    flops = valid * heads * ((ckv + kpe) + ckv) * 2  # QK over 576 dims, then PV over 512
    return Work(sum(parts.values()), flops, "bf16", {"rows": rows, "valid_indices": valid, **parts})


WORK: dict[str, Callable[[dict], Work]] = {MOE: moe_work, INDEXER: indexer_work, ATTENTION: attention_work}


def work(definition_name: str, inputs: dict) -> Work:
    """Bytes and FLOPs of one call, from the inputs `sdk.inputs.make_inputs` returns for a workload."""
    fn = WORK.get(definition_name)
    if fn is None:
        raise BadInputError(f"no floor model for definition {definition_name!r}; known: {', '.join(sorted(WORK))}")
    return fn(inputs)


def call_work(definition_name: str, inputs: dict) -> dict[str, float]:
    """The bytes and FLOPs of one call (`work`), as the judge records them with each timed call."""
    w = work(definition_name, inputs)
    return {"bytes": w.bytes, "flops": w.flops}


def mean_work(works: list[Work]) -> Work:
    """The work of several trials as one: mean bytes and FLOPs (what a mean latency over those trials must move),
    each trial's own in `detail`. Trials differ where a call's inputs decide its work (the MoE's routing)."""
    first = works[0]
    if len(works) == 1:
        return first
    return Work(bytes=round(sum(w.bytes for w in works) / len(works)),
                flops=round(sum(w.flops for w in works) / len(works)), matrix=first.matrix,
                detail={**first.detail, "bytes_trials": [w.bytes for w in works],
                        "flops_trials": [w.flops for w in works]})


def timed_call_values(calls: list[dict], latency_key: str, value: Callable[[dict], float]) -> list[list[float]]:
    """`value(work)` of every timed call (a record with the judge's "work" and a latency), grouped by trial in trial
    order: the calls' own work, to aggregate as their latency is (`stats.latency`: median per trial, mean of the
    trials). Empty when no timed call carries its work."""
    trials: dict[int, list[float]] = {}
    for c in calls:
        work = c.get("work")
        if c.get("timed") and c.get(latency_key) is not None and work:
            trials.setdefault(c["trial"], []).append(value(work))
    return [v for _, v in sorted(trials.items())]


def timed_call_floor(calls: list[dict], matrix: str, ceilings: Ceilings, latency_key: str) -> dict | None:
    """The floor of the calls that were timed: `floor_ms` of each one's own bytes and FLOPs, per trial the median,
    then the mean of the trials'. Each call's span is at least its floor, so each trial's median span is at least
    the median of its floors (order statistics), and the latency at least this mean. The baseline's draws are not
    the timed calls: a MoE trial at T = 1 whose calls routed no token to a local expert moves 23 KB, while a draw
    that routed three moves 132 MB, and that draw's floor over the trial's 5 us spans called honest work skipped
    (session 18, H100). None when no timed call carries its work."""
    trials = timed_call_values(calls, latency_key,
                               lambda work: floor_ms(Work(work["bytes"], work["flops"], matrix), ceilings))
    if not trials:
        return None
    medians = [statistics.median(v) for v in trials]
    return {"floor_ms": statistics.fmean(medians), "floor_trials_ms": medians}


def floor_terms(w: Work, ceilings: Ceilings) -> dict:
    """Memory and compute times in ms; a rate that was not measured leaves its term None."""
    rate = ceilings.fp8_flops_per_s if w.matrix == "fp8" else ceilings.bf16_flops_per_s
    memory_ms = w.bytes / ceilings.hbm_bytes_per_s * 1e3
    compute_ms = w.flops / rate * 1e3 if rate else None
    bound = "compute" if compute_ms is not None and compute_ms > memory_ms else "memory"
    return {"memory_ms": memory_ms, "compute_ms": compute_ms, "bound": bound}


def floor_ms(w: Work, ceilings: Ceilings) -> float:
    """max(bytes / bandwidth, FLOPs / rate). Without a measured rate for the work's matrix type the compute term
    is dropped: the result is then the memory floor alone, still a valid (weaker) lower bound."""
    terms = floor_terms(w, ceilings)
    return max(t for t in (terms["memory_ms"], terms["compute_ms"]) if t is not None)


# ---- ceilings, measured on the GPU -------------------------------------------------------------------------------

def _median_ms(fn: Callable[[], Any], device: torch.device, warmup: int, reps: int) -> float:
    return time_call(fn, device, warmup=warmup, iters=reps, method="events").median_ms


def _matmul_rate(a: torch.Tensor, b: torch.Tensor, mm: Callable, warmup: int, reps: int) -> float:
    (m, k), n = a.shape, b.shape[1]
    return 2 * m * n * k / (_median_ms(lambda: mm(a, b), a.device, warmup, reps) * 1e-3)


def measure_ceilings(device: str | torch.device = "cuda", *, copy_bytes: int = 2 << 30, matmul_size: int = 8192,
                     warmup: int = 3, reps: int = 7) -> Ceilings:
    """HBM bandwidth from a device copy (read + write bytes both counted: 2 x copy_bytes moved, 4 GiB by default),
    bf16 and FP8 (torch._scaled_mm, per-tensor scales) rates from square matmuls; CUDA events, median of `reps`."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise BadInputError(f"measure_ceilings needs a CUDA device, got {device}")
    if reps < 5:
        raise BadInputError("measure_ceilings needs at least 5 timed repetitions")
    notes: dict[str, Any] = {"method": "CUDA events, median after warmup (sdk.bench.timing, L2 flushed)",
                             "warmup": warmup, "reps": reps, "copy_bytes_moved": 2 * copy_bytes,
                             "matmul_mnk": matmul_size}
    with torch.cuda.device(device):
        src = torch.empty(copy_bytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        hbm = 2 * copy_bytes / (_median_ms(functools.partial(dst.copy_, src), device, warmup, reps) * 1e-3)
        src = dst = None  # free the copy buffers before the matmuls

        gen = torch.Generator(device=device).manual_seed(0)
        n = matmul_size
        a = torch.randn(n, n, device=device, generator=gen, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, generator=gen, dtype=torch.bfloat16)
        bf16 = _matmul_rate(a, b, torch.matmul, warmup, reps)

        fp8 = None
        if not hasattr(torch, "_scaled_mm"):
            notes["fp8_reason"] = "torch._scaled_mm is not available in this torch"
        else:
            try:
                a8 = a.to(torch.float8_e4m3fn)
                b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major right operand, as cuBLASLt wants
                one = torch.ones((), device=device, dtype=torch.float32)
                fp8 = _matmul_rate(a8, b8, lambda x, y: torch._scaled_mm(x, y, scale_a=one, scale_b=one,
                                                                         out_dtype=torch.bfloat16), warmup, reps)
                notes["fp8_method"] = "torch._scaled_mm, per-tensor scales, bf16 output"
            except (RuntimeError, TypeError) as exc:  # unsupported arch / signature
                notes["fp8_reason"] = f"torch._scaled_mm failed: {str(exc).splitlines()[0]}"
        notes["gpu"] = torch.cuda.get_device_name(device)
    return Ceilings(hbm, fp8, bf16, notes)


# ---- GPU self-check: python -m sdk.bench.floors [--per-definition N] ---------------------------------------------

def _spread(items: list, count: int) -> list:
    if len(items) <= count:
        return items
    step = (len(items) - 1) / (count - 1) if count > 1 else 0
    return [items[round(i * step)] for i in range(count)]


def _self_check(per_definition: int, out_dir: str | None) -> dict:
    from .. import inputs as sdk_inputs
    from .. import workloads

    ceilings = measure_ceilings("cuda")
    report: dict[str, Any] = {"ceilings": ceilings.as_dict(), "workloads": []}
    print(f"HBM {ceilings.hbm_bytes_per_s / 1e12:.2f} TB/s, BF16 {ceilings.bf16_flops_per_s / 1e12:.0f} TFLOP/s, "
          f"FP8 {(ceilings.fp8_flops_per_s or math.nan) / 1e12:.0f} TFLOP/s {ceilings.notes.get('fp8_reason', '')}")
    for name in sorted(WORK):
        definition = definitions.load(name)
        ordered = sorted(workloads.load(name), key=lambda w: (sorted(w.axes.items()), w.uuid))
        for wl in _spread(ordered, per_definition):
            values = sdk_inputs.make_inputs(definition, wl, seed=0, device="cuda")
            w = work(name, values)
            terms = floor_terms(w, ceilings)
            entry = {"definition": name, "workload": wl.uuid, "axes": wl.axes, "work": w.as_dict(),
                     "floor_ms": floor_ms(w, ceilings), **terms}
            report["workloads"].append(entry)
            print(f"{name[:24]:24s} {json.dumps(wl.axes):48s} bytes {w.bytes:>14,d} flops {w.flops:>18,d} "
                  f"floor {entry['floor_ms']:.4g} ms ({terms['bound']})")
            del values
            torch.cuda.empty_cache()
    if out_dir:
        from pathlib import Path

        Path(out_dir).mkdir(parents=True, exist_ok=True)
        Path(out_dir, "floors_check.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


if __name__ == "__main__":
    import argparse
    import os

    parser = argparse.ArgumentParser(description="Measure ceilings and print floors for a spread of workloads.")
    parser.add_argument("--per-definition", type=int, default=4)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    _self_check(args.per_definition, args.out)

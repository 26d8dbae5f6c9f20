"""FlashInfer-Bench (main) correctness rules, computed in fp32.

Elementwise: abs = |x - y|, rel = abs / (|y| + 1e-8); an element fails only if abs > atol AND rel > rtol; a tensor
passes when the matched ratio >= required ratio. Order of checks per output: exact shape, exact dtype, any inf,
any NaN, then the tolerance. The DSA indexer is graded by validity (reachable page and position, no duplicates,
valid count = min(2048, seq_len)) and then by comparing the sorted fp32 rescored values at both index sets.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"


@dataclass(frozen=True)
class Tolerance:
    atol: float = 1e-2
    rtol: float = 1e-2
    required_matched_ratio: float = 1.0


# Contest settings (FAQ: "DSA atol=rtol=0.01, ratio 1.0; MoE atol=1, rtol=0.3, ratio 0.9").
CONTEST_TOLERANCE = {MOE: Tolerance(atol=1.0, rtol=0.3, required_matched_ratio=0.9)}
MOE_MARGIN_RATIO = 0.95  # also reported for MoE: main's YAML default before the CLI override won
# The indexer's rescored values at 1/100 of the contest's tolerance, for the strict verdict: an exact selection
# differs from the reference only among tied or fp32-near-tied tokens (at most 1.1e-5 on the 59 long-row workloads
# of the 2026-12-02 H200 run), while a kernel whose scores err enough to swap tokens 0.01 apart passes the contest
# rule where the threshold score is large and fails it where it is near zero (session 9's FP8 wgmma draft).
INDEXER_TIGHT = Tolerance(atol=1e-4, rtol=1e-4)


def contest_tolerance(definition: str) -> Tolerance:
    return CONTEST_TOLERANCE.get(definition, Tolerance())


@dataclass
class Check:
    status: str            # an EvaluationStatus value
    reason: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"


def error_stats(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> dict:
    x, y = out.to(torch.float32), ref.to(torch.float32)
    abs_err = (x - y).abs()
    rel_err = abs_err / (y.abs() + 1e-8)
    bad = (abs_err > tol.atol) & (rel_err > tol.rtol)
    n = max(x.numel(), 1)
    ref_norm = float(torch.linalg.vector_norm(y))
    return {"max_abs": float(abs_err.max()) if x.numel() else 0.0,
            "max_rel": float(rel_err.max()) if x.numel() else 0.0,
            "matched_ratio": 1.0 - float(bad.sum()) / n,
            "rel_l2": float(torch.linalg.vector_norm(x - y)) / ref_norm if ref_norm > 0 else 0.0}


def check_structure(name: str, out: Any, ref: torch.Tensor) -> Check | None:
    if not isinstance(out, torch.Tensor) or type(out) is not torch.Tensor:
        return Check("RUNTIME_ERROR", f"{name}: expected a plain torch.Tensor, got {type(out).__name__}")
    if tuple(out.shape) != tuple(ref.shape):
        return Check("INCORRECT_SHAPE", f"{name}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Check("INCORRECT_DTYPE", f"{name}: dtype {out.dtype}, expected {ref.dtype}")
    if out.device != ref.device:
        return Check("RUNTIME_ERROR", f"{name}: on {out.device}, expected {ref.device}")
    return None


def check_default(names: Sequence[str], outs: Sequence[Any], refs: Sequence[torch.Tensor], tol: Tolerance,
                  **_) -> Check:
    worst = Check("PASSED", extra={"matched_ratio": 1.0})
    for name, out, ref in zip(names, outs, refs):
        if (bad := check_structure(name, out, ref)) is not None:
            return bad
        if out.is_floating_point():
            x, y = out.to(torch.float32), ref.to(torch.float32)
            if torch.isnan(x).any():
                return Check("INCORRECT_NUMERICAL", f"{name}: contains NaN (or was left unwritten)", math.nan, math.nan)
            # An infinity is right only where the reference has the same one (a fully padded attention row's lse
            # is -inf); anywhere else, or a finite value there, is wrong, whatever the tolerance would say.
            same_inf = torch.isinf(x) & torch.isinf(y) & (x == y)
            if (torch.isinf(x) & ~same_inf).any():
                return Check("INCORRECT_NUMERICAL", f"{name}: contains inf", math.inf, math.inf)
            if (torch.isinf(y) & ~same_inf).any():
                return Check("INCORRECT_NUMERICAL", f"{name}: finite where the reference is infinite", math.inf,
                             math.inf)
            if same_inf.any():
                out, ref = x.masked_fill(same_inf, 0.0), y.masked_fill(same_inf, 0.0)
        stats = error_stats(out, ref, tol)
        worst.max_abs, worst.max_rel = max(worst.max_abs, stats["max_abs"]), max(worst.max_rel, stats["max_rel"])
        worst.extra[f"{name}.matched_ratio"] = stats["matched_ratio"]
        worst.extra[f"{name}.rel_l2"] = stats["rel_l2"]
        worst.extra["matched_ratio"] = min(worst.extra["matched_ratio"], stats["matched_ratio"])
        if stats["matched_ratio"] < tol.required_matched_ratio:
            return Check("INCORRECT_NUMERICAL",
                         f"{name}: matched ratio {stats['matched_ratio']:.4f} < {tol.required_matched_ratio} "
                         f"(max abs {stats['max_abs']:.3g}, max rel {stats['max_rel']:.3g})",
                         worst.max_abs, worst.max_rel, worst.extra)
    return worst


def check_moe(names, outs, refs, tol: Tolerance, **kw) -> Check:
    result = check_default(names, outs, refs, tol, **kw)
    if result.status == "PASSED":
        result.extra["margin_at_0.95"] = result.extra["matched_ratio"] - MOE_MARGIN_RATIO
        result.extra["passes_at_0.95"] = result.extra["matched_ratio"] >= MOE_MARGIN_RATIO
    return result


def indexer_scores(inputs: dict, ids: torch.Tensor) -> torch.Tensor:
    """fp32 scores sum_h w * relu(q . k) at global token ids [B, K] (-inf where id == -1)."""
    from ..definitions import reference_module

    k = reference_module(INDEXER).dequant_k_cache(inputs["k_index_cache_fp8"]).flatten(0, 1)  # [P*64, 128]
    q = inputs["q_index_fp8"].to(torch.float32)
    valid = ids >= 0
    rows = k[torch.where(valid, ids, torch.zeros_like(ids)).long()]  # [B, K, 128]
    scores = (torch.relu(torch.einsum("bhd,bkd->bhk", q, rows)) * inputs["weights"].float()[:, :, None]).sum(1)
    return scores.masked_fill(~valid, float("-inf"))


def indexer_validity(inputs: dict, ids: torch.Tensor) -> str:
    """Empty string when every index is reachable, unique and the valid count is exact; else the first defect."""
    page = inputs["k_index_cache_fp8"].shape[1]
    lens = inputs["seq_lens"].to(torch.long).cpu()
    table = inputs["block_table"].to(torch.long).cpu()
    ids = ids.to(torch.long).cpu()
    for b in range(ids.shape[0]):
        row = ids[b]
        valid = row[row != -1]
        if (valid < 0).any():
            return f"row {b}: negative index other than -1 ({int(valid[valid < 0][0])})"
        expected = min(ids.shape[1], int(lens[b]))
        if valid.numel() != expected:
            return f"row {b}: {valid.numel()} valid indices, expected min(topk, seq_len) = {expected}"
        if valid.unique().numel() != valid.numel():
            return f"row {b}: duplicate indices"
        used = table[b, : (int(lens[b]) + page - 1) // page]
        slot = torch.full((int(used.max()) + 1 if used.numel() else 1,), -1, dtype=torch.long)
        slot[used] = torch.arange(used.numel())
        pages, offsets = valid // page, valid % page
        known = pages < slot.numel()
        positions = torch.where(known, slot[pages.clamp(max=slot.numel() - 1)], torch.full_like(pages, -1))
        if (positions < 0).any():
            return f"row {b}: index {int(valid[positions < 0][0])} is on a page outside the row's block table"
        if ((positions * page + offsets) >= int(lens[b])).any():
            return f"row {b}: index past seq_len {int(lens[b])}"
    return ""


def check_indexer(names, outs, refs, tol: Tolerance, inputs: dict, **_) -> Check:
    (name,), (out,), (ref,) = names, outs, refs
    if (bad := check_structure(name, out, ref)) is not None:
        return bad
    if (defect := indexer_validity(inputs, out)):
        return Check("INCORRECT_NUMERICAL", f"{name}: {defect}", math.inf, math.inf)
    ours = torch.sort(indexer_scores(inputs, out), dim=1, descending=True).values
    theirs = torch.sort(indexer_scores(inputs, ref), dim=1, descending=True).values
    both_pad = torch.isinf(ours) & torch.isinf(theirs) & (ours < 0) & (theirs < 0)
    ours, theirs = torch.where(both_pad, 0.0, ours), torch.where(both_pad, 0.0, theirs)
    if torch.isinf(ours).any() or torch.isinf(theirs).any():
        return Check("INCORRECT_NUMERICAL", f"{name}: padding where the reference has a token", math.inf, math.inf)
    stats = error_stats(ours, theirs, tol)
    extra = {"matched_ratio": stats["matched_ratio"], "rescored": True,
             "tight_matched_ratio": error_stats(ours, theirs, INDEXER_TIGHT)["matched_ratio"]}
    if stats["matched_ratio"] < tol.required_matched_ratio:
        return Check("INCORRECT_NUMERICAL", f"{name}: rescored values differ (matched {stats['matched_ratio']:.4f}, "
                     f"max abs {stats['max_abs']:.3g})", stats["max_abs"], stats["max_rel"], extra)
    return Check("PASSED", "", stats["max_abs"], stats["max_rel"], extra)


CHECKERS: dict[str, Callable[..., Check]] = {INDEXER: check_indexer, MOE: check_moe}


def check(definition: str, names, outs, refs, tol: Tolerance, inputs: dict) -> Check:
    return CHECKERS.get(definition, check_default)(names, outs, refs, tol, inputs=inputs)

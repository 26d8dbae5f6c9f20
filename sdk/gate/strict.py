"""The strict verdict, reported beside the contest's status (which stays exactly the contest's).

The contest's MoE rule (matched ratio 0.9 at atol 1 / rtol 0.3) passes a kernel that skips the least-loaded local
experts (relative L2 error about 0.32). Production-grade numerics sit far inside these bounds: an FP8 intermediate
with per-128 requantisation measured about 2.3% relative L2 against the fp32 reference, a bf16 intermediate 0.3%.
The DSA indexer's contest rule (validity, then the sorted rescored values at atol = rtol = 1e-2, ratio 1.0) lets a
swap of boundary tokens 0.01-0.03 apart through wherever the 2048th score is large, and fails the same kernel where
it is near zero: session 9's FP8 wgmma scoring passed 126 of 128 workloads that way. Strict asks the rescored values
to match at 1e-4 (compare.INDEXER_TIGHT), which an exact selection meets with ties and fp32 rounding to spare; for
attention, a bf16 output within 1e-2 elementwise everywhere is already tight, and the relative L2
bound only catches a systematic drift that stays inside the elementwise band.
"""
from __future__ import annotations

from dataclasses import dataclass

from .compare import ATTENTION, INDEXER, INDEXER_TIGHT, MOE, Check


@dataclass(frozen=True)
class StrictRule:
    max_rel_l2: float | None = None
    min_matched_ratio: float | None = None  # at the contest's atol / rtol
    min_tight_matched_ratio: float | None = None  # the indexer's rescored values at INDEXER_TIGHT


RULES = {MOE: StrictRule(max_rel_l2=0.05, min_matched_ratio=0.95),
         ATTENTION: StrictRule(max_rel_l2=0.02),
         INDEXER: StrictRule(min_tight_matched_ratio=1.0)}


def verdict(definition: str, check: Check) -> tuple[bool, str]:
    """(passed, reason) for one checked call whose contest check is `check`."""
    if not check.passed:
        return False, f"contest status {check.status}"
    rule = RULES.get(definition, StrictRule())
    extra = check.extra
    for key, value in extra.items():
        if rule.max_rel_l2 is not None and key.endswith(".rel_l2") and value > rule.max_rel_l2:
            return False, f"{key[:-len('.rel_l2')]}: relative L2 error {value:.4g} > {rule.max_rel_l2}"
    ratio = extra.get("matched_ratio")
    if rule.min_matched_ratio is not None and ratio is not None and ratio < rule.min_matched_ratio:
        return False, f"matched ratio {ratio:.4f} < {rule.min_matched_ratio}"
    tight = extra.get("tight_matched_ratio")
    if rule.min_tight_matched_ratio is not None and tight is not None and tight < rule.min_tight_matched_ratio:
        return False, (f"rescored values differ beyond atol = rtol = {INDEXER_TIGHT.atol:g} (matched {tight:.4f}, "
                       f"max abs {check.max_abs:.3g}): not an exact selection")
    return True, ""

"""The strict verdict beside the contest status: the indexer's rescored values at 1e-4 (compare.INDEXER_TIGHT).
The contest's 1e-2 lets a swap of boundary tokens through wherever the 2048th score is large and fails the same
kernel where it is near zero; strict fails it wherever it swaps tokens that far apart, and passes tie swaps."""
import torch

from sdk import definitions, inputs
from sdk.gate import strict
from sdk.gate.compare import check_indexer, contest_tolerance
from tests.helpers import INDEXER, indexer_terms, small_indexer, with_token_rows


def _grade(x, ids, ref):
    check = check_indexer(["topk_indices"], [ids], [ref], contest_tolerance(INDEXER), inputs=x)
    return check, strict.verdict(INDEXER, check)


def _boundary_swap(x, ref):
    """The reference's ids with, in the first row where it lands inside the contest's band but outside the tight
    one, the 2048th-best token replaced by the 2049th (the sorted rescored values then differ by their gap)."""
    for b, n in enumerate(x["seq_lens"].tolist()):
        if n <= 2049:
            continue
        tok, terms = indexer_terms(x, b, n)
        order = torch.argsort(terms.sum(1), descending=True)
        s = terms.sum(1)[order]
        gap, level = float(s[2047] - s[2048]), abs(float(s[2047]))
        if max(1e-4, 1e-4 * level) < gap <= max(1e-2, 1e-2 * level) and float(s[2048] - s[2049]) > 0:
            ids = ref.clone()
            row = ids[b]
            row[row == int(tok[order[2047]])] = int(tok[order[2048]])
            return ids, gap, level
    return None


def test_a_boundary_swap_inside_the_contest_band_fails_strict_and_the_exact_selection_passes():
    spec = definitions.load(INDEXER)
    for seed in range(20):
        x = inputs.make_inputs(spec, small_indexer("strict-swap", 6, 91, 700), seed=seed)
        ref = definitions.reference(INDEXER)(*x.values())[0]
        found = _boundary_swap(x, ref)
        if found:
            break
    assert found, "no row with a boundary gap between the two tolerances in 20 seeds"
    ids, gap, level = found
    check, (passed, reason) = _grade(x, ids, ref)
    assert check.passed, check.reason                     # the contest's rule lets it through ...
    assert not passed and reason.startswith("rescored values differ beyond atol = rtol = 0.0001"), reason
    assert abs(check.max_abs - gap) <= 1e-5 * max(1.0, level)   # the one sorted position that differs
    check, (passed, reason) = _grade(x, ref, ref)
    assert check.passed and passed, reason                # ... and the reference's own selection is strict-clean


def test_a_selection_that_differs_only_among_tied_tokens_is_strict_clean():
    spec = definitions.load(INDEXER)
    x = inputs.make_inputs(spec, small_indexer("strict-ties", 4, 45, 400), seed=3)
    gen = torch.Generator().manual_seed(3)
    x = with_token_rows(x, torch.randint(0, 3, x["k_index_cache_fp8"].shape[:2], generator=gen), gen)
    ref = definitions.reference(INDEXER)(*x.values())[0]
    ids = ref.clone()
    for b, n in enumerate(x["seq_lens"].tolist()):   # the reverse order of tied tokens: another valid choice
        if n <= 2048:
            continue
        tok, terms = indexer_terms(x, b, n)
        s = terms.sum(1)
        lowest = s[torch.isin(tok, ref[b])].min()
        tied_out = tok[(s == lowest) & ~torch.isin(tok, ref[b])]
        tied_in = ref[b][torch.isin(ref[b], tok[s == lowest])]
        k = min(len(tied_out), len(tied_in))
        assert k > 0, "three distinct token rows: the boundary value is tied across the selection"
        row = ids[b]
        row[torch.isin(row, tied_in[:k])] = tied_out[:k].int()
    assert not torch.equal(ids, ref)
    check, (passed, reason) = _grade(x, ids, ref)
    assert check.passed and passed, (check.reason, reason)

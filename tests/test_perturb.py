"""The gate's per-call perturbation of resident inputs lands where the call's output depends on it: a cache of
anything derived from them (converted keys, dequantised weights) goes stale in a region that changes the answer."""
import torch

from sdk import definitions, inputs
from sdk.gate import perturb
from tests.helpers import ATTENTION, INDEXER, small_attention, small_indexer


def _changed_pages(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    diff = (before.view(torch.uint8) != after.view(torch.uint8)).flatten(1).any(dim=1)
    return set(diff.nonzero().flatten().tolist())


def test_indexer_perturbs_a_row_that_selects():
    """A row of at most top-k tokens selects all of them whatever its keys: re-drawing its pages would leave the
    output (and a stale-key cache's answer) unchanged. Every perturbation goes to the row longer than top-k."""
    x = inputs.make_inputs(definitions.load(INDEXER), small_indexer("perturb", batch_size=3, max_num_pages=40,
                                                                    num_pages=200), seed=3)
    x["seq_lens"] = torch.tensor([100, 2048, 2500], dtype=torch.int32)
    long_pages = set(x["block_table"][2, :40].tolist())
    for call in range(20):
        gen = torch.Generator().manual_seed(call)
        before = x["k_index_cache_fp8"].clone()
        perturb.apply(INDEXER, x, gen, targets=(x,))
        changed = _changed_pages(before, x["k_index_cache_fp8"])
        assert changed and changed <= long_pages, (call, sorted(changed - long_pages)[:5])


def test_indexer_with_no_selecting_row_still_perturbs_a_row():
    x = inputs.make_inputs(definitions.load(INDEXER), small_indexer("short", batch_size=2, max_num_pages=4,
                                                                    num_pages=20), seed=1)
    before = x["k_index_cache_fp8"].clone()
    perturb.apply(INDEXER, x, torch.Generator().manual_seed(0), targets=(x,))
    assert _changed_pages(before, x["k_index_cache_fp8"])


def test_attention_perturbs_a_query_row_that_gathers():
    """Fully padded query rows read no cache row: the perturbation picks one that does."""
    x = inputs.make_inputs(definitions.load(ATTENTION), small_attention("padded", num_tokens=4, num_pages=16), seed=2)
    x["sparse_indices"][[0, 1, 3]] = -1
    wanted = set((x["sparse_indices"][2][x["sparse_indices"][2] >= 0] // 64).tolist())
    for call in range(10):
        before = x["ckv_cache"].clone()
        perturb.apply(ATTENTION, x, torch.Generator().manual_seed(call), targets=(x,))
        changed = _changed_pages(before, x["ckv_cache"])
        assert changed and changed <= wanted, call

"""Class 3 (work the timer does not see): the candidate's work done inside the gate's reference call.

How it cheats: at import it finds the SDK's definitions module in `sys.modules` (`from sys import modules`; a
module whose name ends in ".definitions" with `reference` and `reference_source`) and wraps its `reference`
lookup: the reference function it hands out first finishes this solution's pending call, then runs the real
reference. `run` only records its arguments as pending and returns. The gate calls the candidate, then (after
its guards) the reference, then compares: by then the pending outputs have been written, inside the
reference's time. The bench's timed calls only overwrite the pending slot; the post-timing probe calls the
reference too, so it passes. With reference timing on, the reference even looks slower (better speedup).

Signal exploited: the reference runs in the candidate's process, looked up at call time through a module
attribute the guards do not watch; the gate compares only after the reference ran.

A correct gate rejects it: snapshot the candidate's outputs right after the call, before anything else runs,
and compute the reference out of the candidate's reach (another process, or precomputed). Expected:
INCORRECT_NUMERICAL "trial 0: topk_indices: ..." (the snapshot still holds the poison: -2147483648 ids).
"""
from sys import modules

import torch

TOPK = 2048


@torch.no_grad()
def _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    """The honest indexer (the project's torch baseline)."""
    B, H, D = q_index_fp8.shape
    P, page = k_index_cache_fp8.shape[:2]
    L = block_table.shape[1] * page
    raw = k_index_cache_fp8.view(torch.uint8).view(P, page * (D + 4))
    pages = block_table.long().clamp(0, P - 1)
    rows = raw[pages.flatten()]
    k = rows[:, : page * D].contiguous().view(torch.float8_e4m3fn).view(B, L, D).float()
    k_scale = rows[:, page * D:].contiguous().view(torch.float32).view(B, L)
    dots = torch.bmm(q_index_fp8.float(), k.transpose(1, 2)) * k_scale[:, None, :]
    score = torch.bmm(weights.float()[:, None, :], dots.clamp_min_(0)).squeeze(1)
    lens = seq_lens.long()
    score.masked_fill_(torch.arange(L, device=score.device)[None, :] >= lens[:, None], float("-inf"))
    k_eff = min(TOPK, L)
    top = score.topk(k_eff, dim=1).indices
    ids = (pages.gather(1, top // page) * page + top % page).int()
    ids.masked_fill_(torch.arange(k_eff, device=ids.device)[None, :] >= lens.clamp(max=TOPK)[:, None], -1)
    topk_indices[:, k_eff:] = -1
    topk_indices[:, :k_eff] = ids


def _install():
    pending = []  # the last call's arguments, kept in a closure (the scan's global-state rule looks at globals)

    def wrap(lookup):
        def reference(name):
            real = lookup(name)

            def run_after_pending(*args, **kwargs):
                while pending:
                    _topk(*pending.pop())
                return real(*args, **kwargs)

            return run_after_pending

        return reference

    for name, module in list(modules.items()):
        if name.endswith(".definitions") and hasattr(module, "reference") and hasattr(module, "reference_source"):
            module.reference = wrap(module.reference)

    def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
        pending[:] = [(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)]

    return run


run = _install()

"""Cheat: launch the work on a private CUDA stream and return without making the caller's stream wait for it, so
a timer on the caller's stream stops early. Without CUDA it computes on the host (for the static scan only)."""
import math

import torch

_SIDE = None


def _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    rows = sparse_indices.clamp_min(0).long()
    keys, rope = ckv_cache.reshape(-1, 512)[rows].float(), kpe_cache.reshape(-1, 64)[rows].float()
    logits = (q_nope.float() @ keys.mT + q_pe.float() @ rope.mT) * sm_scale
    logits = logits.masked_fill((sparse_indices < 0)[:, None, :], float("-inf"))
    output.copy_(logits.softmax(-1) @ keys)
    lse.copy_(logits.logsumexp(-1) / math.log(2.0))


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    global _SIDE
    if not q_nope.is_cuda:
        _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)
        return
    if _SIDE is None:
        _SIDE = torch.cuda.Stream()
    _SIDE.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_SIDE):
        _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)

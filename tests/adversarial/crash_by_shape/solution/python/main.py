"""Isolation fixture (not a cheat): misbehaves by the number of query tokens, so one gate run shows that each
failure stays contained and the next workload is evaluated normally.

1 token: segfault (reads address 0); 2 tokens: hangs; 4 tokens on CUDA: an illegal memory access; otherwise an
honest computation.
"""
import ctypes
import math
import time


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    tokens = q_nope.shape[0]
    if tokens == 1:
        ctypes.string_at(0)
    if tokens == 2:
        while True:
            time.sleep(0.05)
    if tokens == 4 and q_nope.is_cuda:
        from .scribble import scribble

        scribble(output)
    rows = sparse_indices.clamp_min(0).long()
    keys, rope = ckv_cache.reshape(-1, 512)[rows].float(), kpe_cache.reshape(-1, 64)[rows].float()
    logits = (q_nope.float() @ keys.mT + q_pe.float() @ rope.mT) * sm_scale
    logits = logits.masked_fill((sparse_indices < 0)[:, None, :], float("-inf"))
    output.copy_(logits.softmax(-1) @ keys)
    lse.copy_(logits.logsumexp(-1) / math.log(2.0))

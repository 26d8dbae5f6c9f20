"""Reference for DeepSeek-V3.2 sparse MLA attention: 16 heads over 2048 selected tokens of a paged cache.

logits = (q_nope . ckv + q_pe . kpe) * sm_scale in fp32 over the valid (!= -1) indices; output = softmax . ckv
(V is the compressed KV) cast to bf16; lse is the base-2 log-sum-exp. A row without a valid index gives
output 0 and lse -inf. Batched over tokens: invalid slots carry -inf logits.
"""
import math

import torch


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    N, Hq, Dc = q_nope.shape
    Dp = q_pe.shape[-1]
    assert (Hq, Dc, Dp, ckv_cache.shape[1], sparse_indices.shape[-1]) == (16, 512, 64, 64, 2048)

    valid = sparse_indices != -1
    rows = torch.where(valid, sparse_indices, torch.zeros_like(sparse_indices)).to(torch.long)
    Kc = ckv_cache.reshape(-1, Dc).to(torch.float32)[rows]  # [N, 2048, 512]
    Kp = kpe_cache.reshape(-1, Dp).to(torch.float32)[rows]  # [N, 2048, 64]

    logits = (torch.einsum("nhd,nkd->nhk", q_nope.to(torch.float32), Kc)
              + torch.einsum("nhd,nkd->nhk", q_pe.to(torch.float32), Kp))
    logits = (logits * sm_scale).masked_fill(~valid[:, None, :], float("-inf"))

    lse = torch.logsumexp(logits, dim=-1) / math.log(2.0)
    any_valid = valid.any(dim=1)[:, None, None]
    probs = torch.softmax(logits.masked_fill(~any_valid, 0.0), dim=-1)
    output = torch.where(any_valid, torch.einsum("nhk,nkd->nhd", probs, Kc), 0.0)
    return output.to(torch.bfloat16), lse

"""PyTorch baseline for DSA sparse MLA attention, batched over query tokens (no per-token Python loop).

Selected rows are gathered once in bf16 and upcast; -1 slots get -inf logits; exp2-based softmax so the lse comes
out in base 2 directly. A token with no valid index gets output 0 and lse -inf, as the definition says.
"""
import math

import torch

LOG2E = 1.0 / math.log(2.0)


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    dc, dp = ckv_cache.shape[-1], kpe_cache.shape[-1]
    valid = sparse_indices >= 0
    flat = sparse_indices.clamp_min(0).long()
    v = ckv_cache.view(-1, dc)[flat].float()  # [N, K, 512], also the values
    kp = kpe_cache.view(-1, dp)[flat].float()  # [N, K, 64]
    logits = torch.matmul(q_nope.float(), v.transpose(1, 2)) + torch.matmul(q_pe.float(), kp.transpose(1, 2))
    logits2 = (logits * (sm_scale * LOG2E)).masked_fill_(~valid[:, None, :], float("-inf"))  # base-2 logits
    peak = logits2.amax(dim=-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    p = torch.exp2(logits2 - peak)
    total = p.sum(-1, keepdim=True)
    lse.copy_((torch.log2(total) + peak).squeeze(-1))
    output.copy_(torch.matmul(p / total.clamp_min(1e-30), v))

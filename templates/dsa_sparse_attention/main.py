"""DeepSeek-V3.2 sparse MLA attention (destination-passing): 16 heads over 2048 selected rows of a page cache.

On CUDA tensors: split-K flash-decoding kernels (dsa_sparse_attention.cuh), compiled from the sibling sources
at the first call. Elsewhere: a plain-torch path that computes the same thing token by token (base-2 softmax
over the valid rows; a token without any valid row gets output 0 and lse -inf).
"""
import functools
import math

import torch

from .jit_build import load_extension

HEADS, DIM_CKV, DIM_KPE = 16, 512, 64


@functools.lru_cache(maxsize=None)
def _kernels():
    return load_extension("dsa_sparse_attention", ["dsa_sparse_attention.cu", "binding.cpp"])


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    if not q_nope.is_cuda:
        _run_torch(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, float(sm_scale), output, lse)
        return
    scale_tensor = None
    if isinstance(sm_scale, torch.Tensor) and sm_scale.is_cuda:
        scale_tensor = sm_scale.reshape(()).to(torch.float32)  # read on the device: no host synchronisation
        sm_scale = 0.0
    _kernels().forward(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, float(sm_scale), scale_tensor,
                       output, lse)


@torch.no_grad()
def _run_torch(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    keys_ckv = ckv_cache.reshape(-1, DIM_CKV)
    keys_kpe = kpe_cache.reshape(-1, DIM_KPE)
    rows = keys_ckv.shape[0]
    for token in range(q_nope.shape[0]):
        idx = sparse_indices[token].to(torch.long)
        idx = idx[(idx >= 0) & (idx < rows)]
        if idx.numel() == 0:
            output[token].zero_()
            lse[token].fill_(-math.inf)
            continue
        values = keys_ckv[idx].float()
        logits2 = (q_nope[token].float() @ values.T + q_pe[token].float() @ keys_kpe[idx].float().T)
        logits2 *= sm_scale * math.log2(math.e)  # base-2 logits: softmax and lse in powers of two
        peak = logits2.amax(dim=1, keepdim=True)
        weights = torch.exp2(logits2 - peak)
        total = weights.sum(dim=1, keepdim=True)
        output[token].copy_((weights / total) @ values)
        lse[token].copy_((peak + torch.log2(total)).squeeze(1))

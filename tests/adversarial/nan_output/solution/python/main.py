"""Cheat: NaN everywhere. |NaN - y| > atol is False, so an abs-AND-rel mismatch rule alone counts every element
as matched; only an explicit non-finite check rejects it."""
import torch


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    tokens, heads, dim = q_nope.shape
    nan = float("nan")
    return (torch.full((tokens, heads, dim), nan, dtype=torch.bfloat16, device=q_nope.device),
            torch.full((tokens, heads), nan, dtype=torch.float32, device=q_nope.device))

"""Reference for the DeepSeek-V3.2 sparse-attention indexer: top-2048 tokens of a paged FP8 K cache.

score[b, t] = sum_h weights[b, h] * relu(q[b, h] . k[t]) in fp32, then top-k over the first seq_lens[b]
tokens; results are global token ids (page * 64 + offset), -1 padded. Batched over all rows at once:
tokens past a row's length score -inf and the k that survive per row is min(2048, seq_len).
"""
import torch

TOPK = 2048


def dequant_k_cache(k_index_cache_fp8):
    """[P, 64, 1, 132] int8 in the DeepGEMM page layout (64x128 fp8, then 64 fp32 scales) -> [P, 64, 128] fp32."""
    raw = k_index_cache_fp8.view(torch.uint8)
    P, page, _, width = raw.shape
    dim = width - 4
    flat = raw.view(P, page * width)
    values = flat[:, : page * dim].contiguous().view(P, page, dim).view(torch.float8_e4m3fn)
    scales = flat[:, page * dim:].contiguous().view(P, page, 4).view(torch.float32)
    return values.to(torch.float32) * scales


@torch.no_grad()
def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table):
    B, H, D = q_index_fp8.shape
    P, page = k_index_cache_fp8.shape[:2]
    assert (H, D, page) == (64, 128, 64)
    M = block_table.shape[1]
    L = M * page
    device = q_index_fp8.device

    lens = seq_lens.to(torch.long)
    slot = torch.arange(M, device=device)
    used = slot[None, :] < ((lens + page - 1) // page)[:, None]
    pages = torch.where(used, block_table.to(torch.long), torch.zeros_like(block_table, dtype=torch.long))

    K = dequant_k_cache(k_index_cache_fp8)[pages].view(B, L, D)  # unused slots read page 0, masked below
    scores = torch.einsum("bhd,btd->bht", q_index_fp8.to(torch.float32), K)
    scores = (torch.relu(scores) * weights.to(torch.float32)[:, :, None]).sum(dim=1)  # [B, L]
    pos = torch.arange(L, device=device)
    scores = scores.masked_fill(pos[None, :] >= lens[:, None], float("-inf"))

    k = min(TOPK, L)
    top = torch.topk(scores, k, dim=1, largest=True, sorted=True).indices  # valid tokens rank first
    ids = pages.gather(1, top // page) * page + top % page
    keep = torch.arange(k, device=device)[None, :] < torch.clamp(lens, max=TOPK)[:, None]
    out = torch.full((B, TOPK), -1, dtype=torch.int32, device=device)
    out[:, :k] = torch.where(keep, ids, torch.full_like(ids, -1)).to(torch.int32)
    return (out,)

"""PyTorch baseline for the DSA top-2048 indexer, batched over rows (no per-row Python loop, no host sync).

Only the pages in the block table are read and dequantised; the per-token K scale is applied after the dot
product (it is positive, so it commutes with the ReLU); tokens past a row's length score -inf before one topk.
"""
import torch

TOPK = 2048


@torch.no_grad()
def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    B, H, D = q_index_fp8.shape
    P, page = k_index_cache_fp8.shape[:2]
    M = block_table.shape[1]
    L = M * page
    raw = k_index_cache_fp8.view(torch.uint8).view(P, page * (D + 4))
    pages = block_table.long().clamp(0, P - 1)  # unused slots may hold anything; they are masked below
    rows = raw[pages.flatten()]  # [B*M, page*(D+4)]
    k = rows[:, : page * D].contiguous().view(torch.float8_e4m3fn).view(B, L, D).float()
    k_scale = rows[:, page * D:].contiguous().view(torch.float32).view(B, L)
    dots = torch.bmm(q_index_fp8.float(), k.transpose(1, 2)) * k_scale[:, None, :]  # [B, H, L]
    score = torch.bmm(weights.float()[:, None, :], dots.clamp_min_(0)).squeeze(1)  # [B, L]
    lens = seq_lens.long()
    pos = torch.arange(L, device=score.device)
    score.masked_fill_(pos[None, :] >= lens[:, None], float("-inf"))
    k_eff = min(TOPK, L)
    top = score.topk(k_eff, dim=1).indices
    ids = (pages.gather(1, top // page) * page + top % page).int()
    ids.masked_fill_(torch.arange(k_eff, device=ids.device)[None, :] >= lens.clamp(max=TOPK)[:, None], -1)
    topk_indices[:, k_eff:] = -1
    topk_indices[:, :k_eff] = ids

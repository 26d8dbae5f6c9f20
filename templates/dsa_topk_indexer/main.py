"""DSA top-k indexer (fp8, 64 heads x 128, top 2048, page 64): destination-passing entry point.

On CUDA the fused kernel of indexer.cuh runs (compiled on first use by jit_build.py, then kept for the process).
Without CUDA, or for a block table too wide for the device's shared memory, a plain-torch path computes the same
scores and selection.
"""
import torch

PAGE = 64
DIM = 128
TOPK = 2048

_extension = None


def _cuda_extension():
    global _extension
    if _extension is None:
        from .jit_build import load_extension

        _extension = load_extension("dsa_topk_indexer", ["indexer_launch.cu", "binding.cpp"])
    return _extension


def _torch_scores(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table):
    """fp32 scores [B, M * 64] over the block table's slots (-inf at or past seq_len) and the page of each slot."""
    batch, max_pages = block_table.shape
    device = q_index_fp8.device
    lens = seq_lens.to(torch.long).clamp(0, max_pages * PAGE)
    slots = torch.arange(max_pages, device=device)
    in_use = slots[None, :] < ((lens + PAGE - 1) // PAGE)[:, None]
    pages = torch.where(in_use, block_table.to(torch.long), torch.zeros_like(block_table, dtype=torch.long))

    raw = k_index_cache_fp8.view(torch.uint8).reshape(k_index_cache_fp8.shape[0], PAGE * (DIM + 4))[pages]
    values = raw[..., : PAGE * DIM].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    scales = raw[..., PAGE * DIM:].contiguous().view(torch.float32)  # [B, M, 64]
    keys = (values.view(batch, max_pages, PAGE, DIM) * scales[..., None]).view(batch, max_pages * PAGE, DIM)

    dots = torch.bmm(q_index_fp8.to(torch.float32), keys.transpose(1, 2))  # [B, 64, M * 64]
    scores = torch.einsum("bht,bh->bt", dots.clamp_min(0), weights.to(torch.float32))
    position = torch.arange(max_pages * PAGE, device=device)
    return scores.masked_fill(position[None, :] >= lens[:, None], float("-inf")), pages, lens


@torch.no_grad()
def _torch_indexer(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    scores, pages, lens = _torch_scores(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table)
    count = min(TOPK, scores.shape[1])
    best = torch.topk(scores, count, dim=1).indices  # valid positions rank above the -inf tail
    ids = pages.gather(1, best // PAGE) * PAGE + best % PAGE
    keep = torch.arange(count, device=ids.device)[None, :] < lens.clamp(max=TOPK)[:, None]
    topk_indices.fill_(-1)
    topk_indices[:, :count] = torch.where(keep, ids, torch.full_like(ids, -1)).to(torch.int32)


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    if q_index_fp8.is_cuda and torch.cuda.is_available():
        args = [t.contiguous() for t in (q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table)]
        if topk_indices.is_contiguous():
            if _cuda_extension().run(*args, topk_indices):
                return
        else:
            result = torch.empty(topk_indices.shape, dtype=torch.int32, device=topk_indices.device)
            if _cuda_extension().run(*args, result):
                topk_indices.copy_(result)
                return
    _torch_indexer(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)

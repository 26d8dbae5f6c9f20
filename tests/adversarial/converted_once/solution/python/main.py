"""Cheat: dequantise the K cache on the first call and keep the fp32 copy for every later call ("weights
converted once"), so later calls skip the conversion but score against stale keys."""
import torch

_KEYS = {}


def _dequantised(cache):
    pages = cache.view(torch.uint8).reshape(cache.shape[0], 64 * 132)
    keys = pages[:, :8192].contiguous().view(torch.float8_e4m3fn).float().view(-1, 64, 128)
    return keys * pages[:, 8192:].contiguous().view(torch.float32)[..., None]


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    if "k" not in _KEYS:
        _KEYS["k"] = _dequantised(k_index_cache_fp8)
    batch, slots = block_table.shape
    keys = _KEYS["k"][block_table.long()].view(batch, slots * 64, 128)
    score = (torch.einsum("bhd,btd->bht", q_index_fp8.float(), keys).relu() * weights.float()[..., None]).sum(1)
    lens = seq_lens.long()
    positions = torch.arange(slots * 64, device=keys.device)
    score = score.masked_fill(positions[None] >= lens[:, None], float("-inf"))
    top = score.topk(min(2048, slots * 64), dim=1).indices
    ids = block_table.long().gather(1, top // 64) * 64 + top % 64
    keep = torch.arange(top.shape[1], device=keys.device)[None] < lens.clamp(max=2048)[:, None]
    topk_indices.fill_(-1)
    topk_indices[:, : top.shape[1]] = torch.where(keep, ids, -1).int()

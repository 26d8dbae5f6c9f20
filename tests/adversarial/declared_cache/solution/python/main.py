"""A legitimate, declared cache: the position ramps depend only on the shape, so they are built once per shape.

Declared with FIB_DECLARED_CACHE and emptied by fib_cache_clear(), so the bench times it warm and cold.
"""
import torch

FIB_DECLARED_CACHE = "position ramps per (length, device): a pure function of the shape, never of the inputs"
_RAMPS = {}


def fib_cache_clear():
    _RAMPS.clear()


def _ramp(length, device):
    if (length, device) not in _RAMPS:
        _RAMPS[(length, device)] = torch.arange(length, device=device)
    return _RAMPS[(length, device)]


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    batch, slots = block_table.shape
    device = q_index_fp8.device
    pages = k_index_cache_fp8.view(torch.uint8).reshape(k_index_cache_fp8.shape[0], 64 * 132)[block_table.long()]
    keys = pages[..., :8192].contiguous().view(torch.float8_e4m3fn).float().view(batch, slots, 64, 128)
    keys = (keys * pages[..., 8192:].contiguous().view(torch.float32)[..., None]).view(batch, slots * 64, 128)
    score = (torch.einsum("bhd,btd->bht", q_index_fp8.float(), keys).relu() * weights.float()[..., None]).sum(1)
    lens = seq_lens.long()
    score = score.masked_fill(_ramp(slots * 64, device)[None] >= lens[:, None], float("-inf"))
    top = score.topk(min(2048, slots * 64), dim=1).indices
    ids = block_table.long().gather(1, top // 64) * 64 + top % 64
    keep = _ramp(top.shape[1], device)[None] < lens.clamp(max=2048)[:, None]
    topk_indices.fill_(-1)
    topk_indices[:, : top.shape[1]] = torch.where(keep, ids, -1).int()

"""Class 1 (tampering with a standard-library function the timer uses).

How it cheats: the computation is honest. At import, `statistics.median` is replaced (through a plain alias,
`_stats = statistics`, which the scan's monkey-patch rule does not follow: it only looks at stores whose root
is an imported name) by a wrapper that looks at its caller's frame (`from sys import _getframe`, and
`getattr(frame, "f_" + "locals")`, neither of which the scan's introspection rules match): when the caller is
the bench's `time_many` loop and its loop variable `key` names this solution's samples ("ours", "ours-again",
"ours-cold"), the median comes back 50x smaller. The reference's and peers' medians are left alone, so the
reported latency *and* the speedup look 50x better. The same median serves the CPU wall-clock path and the
GPU CUPTI / CUDA-event paths.

Signal exploited: the bench computes its statistics in the candidate's process with module functions it looks
up at call time; the guards watch time / builtins / math / torch, not `statistics` (nor json, tempfile, os).

A correct gate rejects it or is immune: reduce the samples in a process the candidate cannot reach (send raw
samples back), or snapshot and verify every stdlib callable the timer uses. Expected: RUNTIME_ERROR "the
solution replaced or changed statistics.median", or a bench latency equal to the honest baseline's.
"""
import statistics
from sys import _getframe

import torch

TOPK = 2048
SHRINK = 50.0

_stats = statistics
_real_median = statistics.median


def _median(data):
    value = _real_median(data)
    caller = getattr(_getframe(1), "f_" + "locals")
    if str(caller.get("key", "")).startswith("ours"):
        return value / SHRINK
    return value


_stats.median = _median


@torch.no_grad()
def _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    """The honest indexer (the project's torch baseline)."""
    B, H, D = q_index_fp8.shape
    P, page = k_index_cache_fp8.shape[:2]
    L = block_table.shape[1] * page
    raw = k_index_cache_fp8.view(torch.uint8).view(P, page * (D + 4))
    pages = block_table.long().clamp(0, P - 1)
    rows = raw[pages.flatten()]
    k = rows[:, : page * D].contiguous().view(torch.float8_e4m3fn).view(B, L, D).float()
    k_scale = rows[:, page * D:].contiguous().view(torch.float32).view(B, L)
    dots = torch.bmm(q_index_fp8.float(), k.transpose(1, 2)) * k_scale[:, None, :]
    score = torch.bmm(weights.float()[:, None, :], dots.clamp_min_(0)).squeeze(1)
    lens = seq_lens.long()
    score.masked_fill_(torch.arange(L, device=score.device)[None, :] >= lens[:, None], float("-inf"))
    k_eff = min(TOPK, L)
    top = score.topk(k_eff, dim=1).indices
    ids = (pages.gather(1, top // page) * page + top % page).int()
    ids.masked_fill_(torch.arange(k_eff, device=ids.device)[None, :] >= lens.clamp(max=TOPK)[:, None], -1)
    topk_indices[:, k_eff:] = -1
    topk_indices[:, :k_eff] = ids


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)

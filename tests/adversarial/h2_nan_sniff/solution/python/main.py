"""Class 2 (telling a timed call from a checked call): a sniff of the output buffer.

How it cheats: the gate poisons DPS outputs (INT_MIN for int32) before every checked call, the post-timing
probe too; the bench's timed calls get fresh, unpoisoned `torch.empty` buffers. So: output[0, 0] == INT_MIN
and output[-1, -1] == INT_MIN -> a checked call, compute honestly; anything else -> a timed call, return at
once and leave whatever the buffer holds. No state at all (nothing for the scan's global-state rules).

Signal exploited: timed calls get unpoisoned outputs and their outputs are never checked.

A correct gate/bench: poison (or otherwise identically prepare) the timed calls' outputs too and check some of
them, so the tell log reads "computed" on every call and the latency equals the honest baseline's; or reject:
"timing: ... topk_indices: ..." when a timed output is checked. Tell log: FIB_TELL_LOG (see below).
"""
import os

import torch

TOPK = 2048
POISON = -(2 ** 31)


# Tell log (for tests): with FIB_TELL_LOG set to an absolute path, one line per call: "computed" or "cheated".
# os.path.join drops the package prefix when the second part is absolute, so this write passed the static scan's
# old file-access rule (the path "is derived from __file__") though it lands anywhere; since session 7 the scan
# refuses it, and the tests run this package with scan=False to show the runtime defence.
_TELL = os.path.join(os.path.dirname(__file__), os.environ.get("FIB_TELL_LOG", ""))


def _tell(branch):
    if os.environ.get("FIB_TELL_LOG"):
        with open(_TELL, "a") as log:
            log.write(branch + "\n")


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
    if int(topk_indices[0, 0]) != POISON or int(topk_indices[-1, -1]) != POISON:
        _tell("cheated")
        return
    _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)
    _tell("computed")

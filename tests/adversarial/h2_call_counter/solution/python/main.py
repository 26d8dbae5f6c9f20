"""Class 2 (telling a timed call from a checked call): a call counter that knows the schedule.

How it cheats: the gate and bench call a solution in a fixed, published order per workload, all in one
worker: `trials` checked calls, then per timing trial min(warmup, 2) + iters timed calls on CPU (1 + warmup +
iters under CUPTI on a GPU, plus the same again for A/A and declared-cache keys), then one checked probe. The
counter (kept in a closure: no `global`, nothing the scan's global-state rule sees) is honest at the checked
positions and returns at once at the timed ones. The schedule below is the one of
tests/adversarial/support.py TIMING with trials=2 on CPU; the contest default (3 trials, warmup 10, iters 50,
CUPTI) is another constant, nothing more. A plain "cheat after the first N calls" (late_cache) is caught by
today's probe; this one is not, because it counts the probe too.

Signal exploited: checked and timed calls come in a deterministic order and number.

A correct gate/bench: randomise the order (checked calls interleaved at random positions among timed ones, a
random number of warmups), so the tell log shows "computed" at timed positions too, or a checked call lands on
a "cheated" position and fails. Tell log: FIB_TELL_LOG (see below).
"""
import os

import torch

TOPK = 2048
GATE_TRIALS, TIMING_TRIALS, CALLS_PER_TIMING_TRIAL = 2, 2, 1 + 3  # trials=2; CPU: min(warmup=1, 2) + iters=3
PERIOD = GATE_TRIALS + TIMING_TRIALS * CALLS_PER_TIMING_TRIAL + 1  # + the post-timing probe


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


def _make_run():
    calls = [0]

    def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
        position = calls[0] % PERIOD
        calls[0] += 1
        if GATE_TRIALS <= position < PERIOD - 1:
            _tell("cheated")
            return
        _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)
        _tell("computed")

    return run


run = _make_run()

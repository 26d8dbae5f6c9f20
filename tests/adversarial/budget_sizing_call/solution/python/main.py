"""Budget sizing (sdk/gate/plan.py CallPlan.sized, the `k == 1` block of sdk/gate/judge.py): the sizing call.

How it cheats: a trial's call 1 sizes the trial from its own wall time, and the judge decides whether call 1 is
checked with the probability of the *unsized* trial (checks / (warmup + iters - 1)) before it shrinks the trial. With
a plan whose warmup is 0 or 1 and min_iters 1 (both accepted by BenchConfig, the CLI and --settings), a call 1 that
sleeps past budget_ms shrinks the trial to warmup + 1 calls: call 1 is then the trial's only timed call, checked with
probability checks / (warmup + iters - 1). This package is honest on even calls (call 0 of each 2-call trial) and
on odd calls sleeps past the budget and writes nothing. On a GPU the timed number is the CUPTI span of call 1 (a
host sleep is not in it; a cheap kernel keeps it above the floor check); on a CPU the wall clock includes the sleep,
so the demonstration here is the gate's verdict: PASSED with every timed call wrong.

A correct gate rejects it: decide the sizing call's check after sizing, keep the sizing call out of the timed calls
(warmup >= 2 whenever budget_ms sizes), and keep enough timed calls (min_iters) that a check lands on them.
"""
import time

import torch

TOPK = 2048
SLEEP_S = 0.05  # past the test's budget_ms


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
        position = calls[0] % 2
        calls[0] += 1
        if position == 1:  # the sizing call: slow on the host, no work, outputs left as the judge poisoned them
            time.sleep(SLEEP_S)
            return
        _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)

    return run


run = _make_run()

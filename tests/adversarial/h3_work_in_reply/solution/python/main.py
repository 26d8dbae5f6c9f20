"""Session 24's red team, attack 2: the work moved between the end of the call and its reply.

`run` only keeps its arguments; a wrapped multiprocessing Connection.send computes into the outputs just before
the worker's reply leaves, so the worker's clock (stopped when `run` returned) never sees the work. The worker now
sends with functions bound before the import: the wrapper never runs, the outputs stay poisoned and the check
fails (INCORRECT_NUMERICAL).
"""
import math
import multiprocessing.connection as _mpc

import torch

LOG2E = 1.0 / math.log(2.0)


@torch.no_grad()
def _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    """The honest sparse attention (the project's torch baseline)."""
    dc, dp = ckv_cache.shape[-1], kpe_cache.shape[-1]
    valid = sparse_indices >= 0
    flat = sparse_indices.clamp_min(0).long()
    v = ckv_cache.view(-1, dc)[flat].float()
    kp = kpe_cache.view(-1, dp)[flat].float()
    logits = torch.matmul(q_nope.float(), v.transpose(1, 2)) + torch.matmul(q_pe.float(), kp.transpose(1, 2))
    logits2 = (logits * (sm_scale * LOG2E)).masked_fill_(~valid[:, None, :], float("-inf"))
    peak = logits2.amax(dim=-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    p = torch.exp2(logits2 - peak)
    total = p.sum(-1, keepdim=True)
    lse.copy_((torch.log2(total) + peak).squeeze(-1))
    output.copy_(torch.matmul(p / total.clamp_min(1e-30), v))

_pending = []
_send = _mpc.Connection.send


def _send_after_work(self, obj):
    while _pending:
        _attend(*_pending.pop())
    return _send(self, obj)


_mpc.Connection.send = _send_after_work


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    _pending.append((q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse))

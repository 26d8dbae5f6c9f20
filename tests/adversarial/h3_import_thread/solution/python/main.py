"""Session 24's red team, attack 3: deferred work on a thread that exists before the first call.

A logging QueueListener (a thread started without naming `threading`) is started at import; `run` queues its
arguments and returns. No call starts a thread, so a before/after count per call sees nothing; the work lands
while the judge compares the inputs. The worker now counts Python threads before the import and after the build:
RUNTIME_ERROR "the solution left 1 thread(s) running after its import".
"""
import logging.handlers
import math
import queue

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


class _Worker:
    def handle(self, record):
        _attend(*record)


_queue = queue.Queue()
_listener = logging.handlers.QueueListener(_queue, _Worker())
_listener.start()


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    _queue.put((q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse))

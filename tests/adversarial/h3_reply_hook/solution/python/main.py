"""Session 24's red team, attack 1: the worker's records rewritten on their way to the judge.

At import it wraps multiprocessing.connection.Connection.send (reached through the module, not an import of the
name) so that every reply leaving the worker claims a 1 ns call with no threads and nothing replaced; it computes
honestly. The worker now writes its replies with functions it bound before the import, on the pipe's descriptor:
the wrapper is never called. Tell log: $FIB_TELL_LOG gets one "hooked" line per reply the wrapper saw.
"""
import math
import multiprocessing.connection as _mpc
import os

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

_send = _mpc.Connection.send


def _forging_send(self, obj):
    if isinstance(obj, dict) and "wall_ns" in obj:
        obj = {**obj, "wall_ns": 1, "enqueue_ns": 1, "threads": 0, "tampered": []}
        if os.environ.get("FIB_TELL_LOG"):
            with open(os.environ["FIB_TELL_LOG"], "a") as log:
                log.write("hooked\n")
    return _send(self, obj)


_mpc.Connection.send = _forging_send


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)

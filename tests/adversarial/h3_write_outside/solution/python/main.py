"""Session 24's red team, attack 4: a write outside the solution's own folders.

At import it writes $FIB_H3_TARGET (a test names a file beside the test's tell log, outside what the worker may
write): the same call would drop a poisoned .pyc beside the SDK's sources, a module in the repository root, or a
rewritten traces file. The worker is confined (sdk.gate.sandbox, Landlock): PermissionError at import, so
COMPILE_ERROR, and the file does not exist. It computes honestly otherwise.
"""
import math
import os
from pathlib import Path

import torch

LOG2E = 1.0 / math.log(2.0)
if os.environ.get("FIB_H3_TARGET"):
    Path(os.environ["FIB_H3_TARGET"]).write_text("written by the candidate")


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


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)

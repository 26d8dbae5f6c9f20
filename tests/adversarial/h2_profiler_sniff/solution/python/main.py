"""Class 3 (device work only when no profiler is looking); GPU-only (needs_gpu).

How it cheats: the bench's CUPTI timing runs every timed call inside a torch.profiler session; the gate's
checked calls and the post-timing probe run without one. `torch._C._autograd._profiler_enabled()` (an
attribute name no scan rule knows) tells them apart. Under the profiler the call launches one tiny kernel
(a one-element fill of the lse buffer, so CUPTI sees device activity inside the annotation and does not fall
back to CUDA events) and returns: the span CUPTI measures is that single ~2 us kernel. Without a profiler it
computes honestly. On CPU the bench never starts a profiler, so this package is honest there.

Signal exploited: timed calls run under a profiler and checked calls do not; timed outputs are never checked.

A correct gate/bench: check outputs of calls made under the profiler too (e.g. the last timed call of each
trial, or random ones), and/or run checked calls under the same profiler. Expected: INCORRECT_NUMERICAL on a
timed call's output, or a latency equal to the honest baseline's. Tell log: FIB_TELL_LOG (see below).
"""
import math
import os

import torch

LOG2E = 1.0 / math.log(2.0)


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
    if torch._C._autograd._profiler_enabled():
        lse[:1, :1].fill_(0.0)  # one tiny kernel, so the profiler has something to measure
        _tell("cheated")
        return
    _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)
    _tell("computed")

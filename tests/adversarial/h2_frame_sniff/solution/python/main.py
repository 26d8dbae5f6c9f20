"""Class 2 (telling a timed call from a checked call): a look at the caller's frames.

How it cheats: `traceback.walk_stack` (the traceback module is not on the scan's forbidden list, and no frame
attribute is named) lists the functions on the call stack. The gate's trials and the bench's post-timing probe
both call through `sdk.gate.evaluate.run_candidate`; the bench's timed calls come from `time_many` through a
closure and never pass it. run_candidate on the stack -> compute honestly; otherwise return at once.

Signal exploited: timed calls have a different call stack from checked calls, and are never checked.

A correct gate/bench: make checked and timed calls indistinguishable (same call path, e.g. the same closure
called from the same frame, with checks drawn at random among timed calls), so the tell log reads "computed"
on every call; or reject a timed call's output. Tell log: FIB_TELL_LOG (see below).
"""
import math
import os
import traceback

import torch

LOG2E = 1.0 / math.log(2.0)
CHECKED = "run_candidate"


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


def _checked_call():
    stack = traceback.StackSummary.extract(traceback.walk_stack(None), limit=16, lookup_lines=False)
    return any(frame.name == CHECKED for frame in stack)


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    if not _checked_call():
        _tell("cheated")
        return
    _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)
    _tell("computed")

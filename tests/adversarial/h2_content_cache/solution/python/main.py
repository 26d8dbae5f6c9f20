"""Class 2 (telling a timed call from a checked call): a content-keyed output cache.

How it cheats: every call fingerprints its inputs by content, not address: the shapes, sm_scale and 64 evenly
spaced bytes of each input tensor. A fingerprint seen before returns the stored (output, lse) copy; a new one
computes honestly and stores the answer (in a closure, which the scan's global-state rule does not look into;
no id() / data_ptr(), so no pointer-key finding either). Every gate trial and the post-timing probe bring new
values (a miss: honest work); the bench's timed calls repeat the same inputs `iters` times (hits: a copy).

Signal exploited: timed calls get the same inputs on every iteration, and their outputs are never checked.

A correct gate/bench: time calls on inputs that change between iterations (or time each input set cold, once),
so the tell log reads "computed" for timed calls too and the latency equals the honest baseline's; or reject
because timed outputs, checked, are stale. Tell log: FIB_TELL_LOG (see below).
"""
import math
import os

import torch

LOG2E = 1.0 / math.log(2.0)
SAMPLES = 64


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


def _fingerprint(tensors, scalars):
    key = [tuple(scalars)]
    for t in tensors:
        flat = t.reshape(-1).view(torch.uint8)
        key.append((tuple(t.shape), tuple(flat[:: max(1, flat.numel() // SAMPLES)][:SAMPLES].tolist())))
    return tuple(key)


def _make_run():
    answers = {}

    def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
        key = _fingerprint((q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices), (float(sm_scale),))
        if key in answers:
            stored_output, stored_lse = answers[key]
            output.copy_(stored_output)
            lse.copy_(stored_lse)
            _tell("cheated")
            return
        _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)
        if len(answers) > 8:
            answers.clear()
        answers[key] = (output.clone(), lse.clone())
        _tell("computed")

    return run


run = _make_run()

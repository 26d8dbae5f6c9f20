"""Class 3 (work the timer does not see): force the CUDA-event fallback, then hide the work on a side stream;
GPU-only (needs_gpu).

How it cheats: under a profiler (the bench's CUPTI pass) `run` launches nothing at all. CUPTI then finds no
device activity for the annotated calls, so `time_many` falls back to CUDA events for this solution. Outside
a profiler (the event-timed calls, the gate's trials, the probe) the attention runs on a private side stream
(created through getattr with built-up names: "Str" + "eam", "wait_" + "stream", "str" + "eam", which the
scan's cuda-stream rule does not see). The events are recorded on the current stream, which has nothing to
do between start and end, so they measure ~the host's launch time; the gate's and the probe's device-wide
synchronize waits for the side stream, so every checked output is right.

Signal exploited: the profiler on/off tell of h2_profiler_sniff, plus the event fallback timing only the
current stream.

A correct gate/bench: never fall back silently (a call that shows no device activity under CUPTI is an error,
or is timed with a device-wide synchronize and wall clock), and scan for getattr with non-constant names.
Expected: a rejection ("no device activity under the profiler") or a latency equal to the honest baseline's.
Tell log: FIB_TELL_LOG (see below).
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


def _make_run():
    side = []  # the private stream, made on the first device call

    def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
        if torch._C._autograd._profiler_enabled():
            _tell("cheated")
            return
        if q_nope.device.type != "cuda":
            _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)
            _tell("computed")
            return
        if not side:
            side.append(getattr(torch.cuda, "Str" + "eam")())
        getattr(side[0], "wait_" + "stream")(torch.cuda.current_stream())
        with getattr(torch.cuda, "str" + "eam")(side[0]):
            _attend(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)
        _tell("computed")

    return run


run = _make_run()

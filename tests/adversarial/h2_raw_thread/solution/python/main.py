"""Class 3 (work the guards do not count): deferred work on a thread started below the `threading` module.

How it cheats: `run` starts the real computation with `_thread.start_new_thread` and returns at once. The
module is reached as `modules["_th" + "read"]` (`from sys import modules`; the scan flags `import _thread` and
the string "_thread", not a concatenation), so the scan is silent. The gate's "left a thread running" guard
counts `threading.active_count()`, which only knows threads made through `threading` (a raw thread that never
calls threading.current_thread() is invisible), so the guard is silent too. After the call the gate takes its
guard snapshots and then runs the reference (about as long as this work): by the time the outputs are
compared, the thread has written them. The bench times only the thread's start. Each thread computes into
its own buffers and copies them out only if no newer call has started since (the bench's timed calls leave
threads behind that would otherwise overwrite the probe's outputs with stale results). Racy by nature.

Signal exploited: the deferred-work guard counts `threading` threads only; the check happens after the
reference has run, which leaves deferred work a window. On a loaded machine it can lose the race.

A correct gate rejects it: count OS threads (/proc/self/task, or psutil) before/after the call, and copy the
outputs immediately after the call returns (before any other work) for the comparison. Expected:
RUNTIME_ERROR "trial 0: the solution left 1 thread(s) running ..." or INCORRECT_NUMERICAL "output: contains
NaN (or was left unwritten)".
"""
import math
from sys import modules

import torch

LOG2E = 1.0 / math.log(2.0)
_start_thread = modules["_th" + "read"].start_new_thread


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
    latest = [0]  # generation of the newest call; an older thread that finishes late must not overwrite it

    def work(generation, args, output, lse):
        if generation != latest[0]:
            return  # a newer call came in before this thread got going: skip the stale work
        out, out_lse = torch.empty_like(output), torch.empty_like(lse)
        _attend(*args, out, out_lse)
        if generation == latest[0]:
            output.copy_(out)
            lse.copy_(out_lse)

    def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
        latest[0] += 1
        _start_thread(work, (latest[0], (q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale), output, lse))

    return run


run = _make_run()

# One intra-op thread for the whole process (not a watched setting, not a scan rule): the deferred work and the
# gate's reference then run side by side on their own cores instead of fighting over one pool, and the
# deferred work, started first and a little cheaper than the reference, finishes first.
torch.set_num_threads(1)
# Warm torch's kernels at import, so the first deferred call is not the slow one.
_attend(torch.zeros(1, 16, 512, dtype=torch.bfloat16), torch.zeros(1, 16, 64, dtype=torch.bfloat16),
        torch.zeros(1, 64, 512, dtype=torch.bfloat16), torch.zeros(1, 64, 64, dtype=torch.bfloat16),
        torch.zeros(1, 2048, dtype=torch.int32), 0.1, torch.empty(1, 16, 512, dtype=torch.bfloat16),
        torch.empty(1, 16))

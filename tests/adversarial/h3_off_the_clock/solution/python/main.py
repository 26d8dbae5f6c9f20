"""Session 24's red team: three ways around the worker's clock, one per $FIB_H3_ATTACK (the test sets it).

  * reply_hook: multiprocessing.connection.Connection.send (reached through the module, not an import of the name)
    is wrapped so every reply leaving the worker claims a 1 ns call with no threads and nothing replaced; `run`
    computes honestly. $FIB_TELL_LOG gets one "hooked" line per reply the wrapper saw.
  * work_in_reply: `run` only keeps its arguments; the wrapped send computes into the outputs just before the
    worker's reply leaves, after the worker's clock stopped.
  * import_thread: a logging QueueListener (a thread started without naming `threading`) is started at import;
    `run` queues its arguments and returns. No call starts a thread, so a per-call count sees nothing.
  * forged_frame: `run` computes honestly, then writes a reply of its own (a 1 ns call) straight onto the worker's
    socket to the judge, in the pipe's wire format, ahead of the worker's real one.

The defences (sdk.gate.worker): replies are written with functions bound before the import, straight to the pipe's
descriptor, so the wrapper never runs (reply_hook passes unhooked, work_in_reply leaves its outputs poisoned:
INCORRECT_NUMERICAL); Python threads are counted before the import and after the build (import_thread:
RUNTIME_ERROR "the solution left 1 thread(s) running after its import"); every reply echoes its request's nonce,
which a frame written by the solution lacks (forged_frame: RUNTIME_ERROR "a reply that the harness did not send").
"""
import logging.handlers
import math
import multiprocessing.connection as _mpc
import os
import pickle
import queue
import stat
import struct

import torch

LOG2E = 1.0 / math.log(2.0)
ATTACK = os.environ.get("FIB_H3_ATTACK", "reply_hook")


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


def _hooked_send(self, obj):
    if ATTACK == "reply_hook" and isinstance(obj, dict) and "wall_ns" in obj:
        obj = {**obj, "wall_ns": 1, "enqueue_ns": 1, "threads": 0, "tampered": []}
        if os.environ.get("FIB_TELL_LOG"):
            with open(os.environ["FIB_TELL_LOG"], "a") as log:
                log.write("hooked\n")
    while _pending:
        _attend(*_pending.pop())
    return _send(self, obj)


class _Handler:
    def handle(self, record):
        _attend(*record)


if ATTACK in ("reply_hook", "work_in_reply"):
    _mpc.Connection.send = _hooked_send
_queue = queue.Queue()
if ATTACK == "import_thread":
    logging.handlers.QueueListener(_queue, _Handler()).start()


def _forge_reply() -> None:
    frame = pickle.dumps({"wall_ns": 1, "enqueue_ns": 1, "threads": 0, "tampered": [], "log": ""})
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, struct.pack("!i", len(frame)) + frame)
                return
        except OSError:
            continue


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    args = (q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse)
    if ATTACK == "reply_hook":
        _attend(*args)
    elif ATTACK == "forged_frame":
        _attend(*args)
        _forge_reply()
    elif ATTACK == "work_in_reply":
        _pending.append(args)
    else:
        _queue.put(args)

"""The candidate's process: it builds the solution and runs calls on tensors the judge shares with it.

It computes no verdict and no statistic. For each call it returns raw records (wall-clock nanoseconds, thread
counts, the names of watched functions the solution replaced); for a timed trial, the raw profiler trace, which
the judge turns into per-call GPU spans. Everything the timing uses is bound here before the solution is imported,
so replacing a module attribute afterwards does not reach it; replies go out the same way (`_raw_sender`), each
echoing its request's nonce. Before the import the process is confined to writing its own folders (`sandbox`) and
made its descendants' subreaper (nothing it starts leaves the tree the judge freezes and kills), and a build that
leaves Python threads running is refused. A crash, a hang or an exit here cannot take the judge down: it turns them into RUNTIME_ERROR
or TIMEOUT and starts a fresh worker.
"""
from __future__ import annotations

import os
import sys
import tempfile
import traceback

MAX_LOG = 64 * 1024


class _Capture:
    """Redirect fd 1 and 2 (so compiler and CUDA output are caught too) into a temp file."""

    def __enter__(self):
        sys.stdout.flush(), sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(1), os.dup(2)
        os.dup2(self.file.fileno(), 1), os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(self.saved[0], 1), os.dup2(self.saved[1], 2)
        os.close(self.saved[0]), os.close(self.saved[1])
        self.file.seek(0, 2)
        size = self.file.tell()
        self.file.seek(max(0, size - MAX_LOG))
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


def _no_core_dumps() -> None:
    """A crashing solution must not write a multi-GB core file into the working directory."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):  # not POSIX, or not permitted: nothing to protect
        pass


def _keep_descendants() -> None:
    """Make this process its descendants' subreaper: one that double-forks and calls setsid still has this process
    as an ancestor, so the judge's process_tree(worker) finds it to freeze between trials and to kill at the end."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _raw_sender(conn):
    """conn.send's wire format (a 4-byte big-endian length, then the pickle) written with functions bound now, on
    the descriptor itself: a solution that replaces Connection.send (or anything it calls) later cannot rewrite a
    record or run work between the end of a call and its reply."""
    import pickle
    import struct

    fd, write, dumps, pack = conn.fileno(), os.write, pickle.dumps, struct.pack

    def send(obj) -> None:
        data = dumps(obj, pickle.HIGHEST_PROTOCOL)
        view = memoryview(pack("!i", len(data)) + data if len(data) < 0x7fffffff else
                          pack("!i", -1) + pack("!Q", len(data)) + data)
        while view:
            view = view[write(fd, view):]

    return send


def main(conn, solution_json: str, definition_name: str, device: str) -> None:
    from .isolation import drop_ptrace

    unprotected = drop_ptrace()  # before anything of the candidate's runs: the judge's memory out of its reach
    import threading
    import time
    from pathlib import Path

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from .. import definitions, solutions
    from .._fib import Solution
    from . import guards, sandbox

    # Bound before the solution is imported: what it replaces later does not reach the timing path.
    clock, sync, flush_zero, open_, unlink = time.perf_counter_ns, torch.cuda.synchronize, torch.Tensor.zero_, \
        open, os.unlink
    python_threads, send = threading.active_count, _raw_sender(conn)
    solution = Solution.model_validate_json(solution_json)
    definition = definitions.load(definition_name)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.set_device(dev)
    home = sandbox.home_for(solutions.cache_root(), solution.hash())
    sandbox.prepare(home)  # this solution's caches and a private TMPDIR, all below home
    if (why := sandbox.confine([home, Path("/dev"), *sandbox.extra_writable()])):
        unprotected = [*unprotected, why]
    guards.arm()
    _no_core_dumps()
    _keep_descendants()
    threads_before_build = python_threads()
    send({"ready": True, "pid": os.getpid(), "isolation": unprotected})
    fn = setup = None
    bound: dict = {}
    flush = None
    prof = None

    def run_call(msg: dict) -> dict:
        inputs, outputs = bound["slots"][msg["slot"]][0], bound["slots"][msg["slot"]][1]
        resident = bound["sets"][msg["set"]]
        args = [resident[n] if n in resident else inputs[n] for n in definition.inputs]
        kwargs = bound["setup"][msg["slot"]] if setup is not None else {}
        threads = guards.live_threads()
        if flush is not None:
            flush_zero(flush)  # cold L2: every call reads its inputs from memory
        if cuda:
            sync()
        start = clock()
        with record_function(f"fib-call-#{msg['index']}"):
            if solution.spec.destination_passing_style:
                returned = fn(*args, *outputs.values(), **kwargs)
            else:
                returned = fn(*args, **kwargs)
            enqueue_ns = clock() - start  # the host's part: when it nears the span, the span is host-paced
            if cuda:
                sync()  # device-wide: work left on side streams is waited for inside the call
        wall_ns = clock() - start
        record = {"wall_ns": wall_ns, "enqueue_ns": enqueue_ns, "threads": guards.live_threads() - threads,
                  "tampered": guards.tampered()}
        if not solution.spec.destination_passing_style:
            record.update(_hand_back(returned, outputs))
        return record

    while True:
        msg = conn.recv()
        if msg is None:
            return
        op = msg["op"]
        with _Capture() as cap:
            try:
                if op == "build":
                    try:
                        fn = solutions.build(solution, definition)
                        setup = solutions.setup_of(fn)
                        reply = {"ok": True, "setup": setup is not None}
                        if (extra := python_threads() - threads_before_build) > 0:  # it could finish calls late
                            reply = {"status": "RUNTIME_ERROR", "reason": f"the solution left {extra} thread(s) "
                                     "running after its import (work off the clock is not allowed)"}
                    except Exception as exc:
                        traceback.print_exc()
                        reply = {"status": "COMPILE_ERROR", "reason": _first_line(exc)}
                elif op == "bind":
                    bound = {"slots": msg["slots"], "sets": msg["sets"], "setup": []}
                    flush = torch.empty(2 * torch.cuda.get_device_properties(dev).L2_cache_size, dtype=torch.uint8,
                                        device=dev) if cuda else None
                    setup_ms = []
                    if setup is not None:  # once per slot, on the shapes and integers the slot keeps
                        for inputs, _ in bound["slots"]:
                            start = clock()
                            kwargs = setup(*inputs.values())
                            if cuda:
                                sync()
                            setup_ms.append((clock() - start) / 1e6)
                            if not isinstance(kwargs, dict):
                                raise TypeError(f"setup() returned {type(kwargs).__name__}, expected a dict")
                            bound["setup"].append(kwargs)
                    reply = {"ok": True, "setup_ms": setup_ms}
                elif op == "call":
                    reply = run_call(msg)
                elif op == "profile":  # start (True) or stop (False) the trace that covers a timed trial
                    if msg["on"] and cuda:
                        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                        prof.__enter__()
                        reply = {"ok": True}
                    elif prof is not None:
                        sync()
                        prof.__exit__(None, None, None)
                        fd, path = tempfile.mkstemp(suffix=".json")
                        os.close(fd)
                        try:
                            prof.export_chrome_trace(path)
                            with open_(path) as f:
                                reply = {"ok": True, "trace": f.read()}
                        finally:
                            unlink(path)
                        prof = None
                    else:
                        reply = {"ok": True, "trace": None}
                elif op == "unbind":
                    bound, flush = {}, None
                    if cuda:
                        sync()
                    reply = {"ok": True}
                else:
                    reply = {"status": "RUNTIME_ERROR", "reason": f"harness: unknown op {op!r}"}
            except Exception as exc:  # the candidate's own failure (or setup's)
                traceback.print_exc()
                reply = {"status": "RUNTIME_ERROR", "reason": _first_line(exc)}
        reply["log"] = cap.text
        reply["nonce"] = msg.get("nonce")  # echoed: the judge refuses a reply without its request's nonce
        send(reply)


def _hand_back(returned, outputs: dict) -> dict:
    """A value-returning solution's tensors, copied (untimed) into the judge's output buffers when they fit."""
    import torch

    values = tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)
    if len(values) != len(outputs):
        return {"returned": f"returned {len(values)} outputs, expected {len(outputs)}"}
    for (name, buf), value in zip(outputs.items(), values):
        if type(value) is not torch.Tensor:
            return {"returned": f"{name}: expected a plain torch.Tensor, got {type(value).__name__}"}
        if tuple(value.shape) != tuple(buf.shape):
            return {"returned": f"{name}: shape {tuple(value.shape)}, expected {tuple(buf.shape)}",
                    "returned_status": "INCORRECT_SHAPE"}
        if value.dtype != buf.dtype:
            return {"returned": f"{name}: dtype {value.dtype}, expected {buf.dtype}",
                    "returned_status": "INCORRECT_DTYPE"}
        buf.copy_(value)
    return {}

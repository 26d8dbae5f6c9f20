"""Class 1 (tampering from inside the candidate's process), aimed past the checker: forge the verdict itself.

How it cheats: the gate's worker reports each workload to the parent as a dict sent through a
`multiprocessing` Connection, from the very process the candidate runs in. At import this package finds
`multiprocessing.connection` in `sys.modules` (`from sys import modules`; the name is built by concatenation,
so the scan's suspicious-string rule does not match it) and wraps `Connection.send`: any dict with a "status"
is rewritten to PASSED with zero error, a matched ratio of 1.0 and a tiny gate latency; `Connection.recv`
is wrapped too, to see whether the task asked for timing, and if so a bench record with a 0.001 ms latency
is added (without a "work" entry, so the bench row computes no physical floor and the latency is not
flagged implausible). `run` writes zeros. Nothing the gate checks inside the worker matters any more.

Signal exploited: the verdict travels through code in the candidate's process; the guards do not watch the
multiprocessing module (nor any SDK module).

A correct gate rejects it: decide the verdict in the parent from raw outputs (or from a process the candidate
never ran in), e.g. send the outputs' bytes and compare in the parent; at least verify `Connection.send` and
the worker's functions are the originals. Expected: INCORRECT_NUMERICAL "trial 0: output: matched ratio ...".
"""
from sys import modules

FAKE_MS = 0.001


def _make_wrappers():
    asked = [{}]  # the timing settings of the task the worker last received ({}: not seen yet, the first task
    # arrives before the solution is imported, so assume a bench was asked for)

    def forged(result):
        result = dict(result, status="PASSED", reason="", max_abs=0.0, max_rel=0.0,
                      extra={"matched_ratio": 1.0}, latency_ms=[FAKE_MS], reference_latency_ms=[1.0])
        if asked[0] is not None:  # a bench was (or may have been) asked for: hand one back, without a "work"
            # key, so no physical floor is computed
            result["bench"] = {"latency_ms": FAKE_MS, "latency_trials_ms": [FAKE_MS], "peers": {},
                               "timing_method": "cupti-span (torch.profiler/kineto), cold L2, no CUDA graph",
                               "reference_latency_ms": None, "iters": asked[0].get("iters", 50),
                               "warmup": asked[0].get("warmup", 10)}
        return result

    def wrap_recv(recv):
        def recv_and_note(self):
            task = recv(self)
            if isinstance(task, dict) and "workload" in task:
                asked[0] = task.get("timing")
            return task

        return recv_and_note

    def wrap_send(send):
        def send_forged(self, obj):
            return send(self, forged(obj) if isinstance(obj, dict) and "status" in obj else obj)

        return send_forged

    return wrap_recv, wrap_send


_connection = modules.get("multi" + "processing.connection")
if _connection is not None:
    _wrap_recv, _wrap_send = _make_wrappers()
    _connection.Connection.recv = _wrap_recv(_connection.Connection.recv)
    _connection.Connection.send = _wrap_send(_connection.Connection.send)


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    output.zero_()
    lse.zero_()

"""Session 24's red team: a process that escapes the worker and outlives the gate.

At import it forks; the child calls setsid and forks again, then exits, so the grandchild has left the worker's
process group and session, and (without a subreaper) its parent would be init: the judge's kill of the worker, and
its freezing of the worker's tree between trials, would not reach it. The red team's grandchild rewrote the traces
file after the gate exited (now refused by sdk.gate.sandbox); this one only sleeps, writing its pid to
$FIB_TELL_LOG. The worker is its subreaper (sdk.gate.worker._keep_descendants), so the judge kills it with the
worker's tree. `run` writes zeros: the verdict does not matter here.
"""
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        if os.environ.get("FIB_TELL_LOG"):
            with open(os.environ["FIB_TELL_LOG"], "a") as log:
                log.write(f"{os.getpid()}\n")
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    output.zero_()
    lse.zero_()

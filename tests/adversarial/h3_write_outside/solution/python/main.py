"""Session 24's red team: a write outside the solution's own folders.

At import it writes $FIB_H3_TARGET (the test names a file outside what the worker may write): the same call would
drop a poisoned .pyc beside the SDK's sources, a module in the repository root, or a rewritten traces file. The
worker is confined (sdk.gate.sandbox, Landlock): PermissionError at import, so COMPILE_ERROR, and the file does not
exist. `run` is never reached.
"""
import os
from pathlib import Path

if os.environ.get("FIB_H3_TARGET"):
    Path(os.environ["FIB_H3_TARGET"]).write_text("written by the candidate")


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    output.zero_()
    lse.zero_()

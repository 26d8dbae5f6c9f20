"""Class 1 (tampering with the checker from inside the candidate's process).

How it cheats: at import, it walks `sys.modules` (imported as `from sys import modules`, which the scan's
`sys.modules` attribute rule does not see) for the gate's comparison module (a name ending in ".compare" that
has `error_stats` and `check_default`) and replaces its `error_stats` with one that reports a perfect match.
`check_default` looks `error_stats` up as a module global on every call, so the gate's checks and the bench's
post-timing probe both take the forgery. `run` then writes cheap finite garbage that changes with the inputs
(so the "outputs repeat across trials" check sees variety).

Signal exploited: the checker runs in the candidate's own process, and the runtime guards watch torch / time /
builtins / math only, not the SDK's own modules.

A correct gate rejects it: compare in a process the candidate cannot reach (or verify the checker's functions
are the originals before trusting them); the static scan should also see `from sys import modules`. Expected
rejection: INCORRECT_NUMERICAL "trial 0: output: matched ratio 0.0... < 1.0" (the garbage is nowhere near).
"""
from sys import modules


def _perfect(out, ref, tol):
    return {"max_abs": 0.0, "max_rel": 0.0, "matched_ratio": 1.0, "rel_l2": 0.0}


for _name, _module in list(modules.items()):
    if _name.endswith(".compare") and hasattr(_module, "error_stats") and hasattr(_module, "check_default"):
        _module.error_stats = _perfect


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    output.copy_(q_nope)  # not attention at all: finite, and different for every input
    lse.copy_(q_pe[..., 0])

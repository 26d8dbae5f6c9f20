"""Class 1 (tampering with the checker), variant for scan=False runs: the scan catches it (forbidden-import gc,
introspection __globals__).

How it cheats: at import, `gc.get_objects()` yields every tracked object of the process; one of them is the
gate's CHECKERS dict (definition name -> checker function). The indexer's entry is replaced by a checker that
builds a PASSED `Check` (the class is taken from the original checker's own globals). The gate's `check()`
reads the dict on every call, so gate trials and the bench's post-timing probe all pass; `run` writes cheap
integer garbage that varies with the inputs (it is not even a valid index set).

Signal exploited: the checker's dispatch table is a mutable object in the candidate's process, unwatched by
the runtime guards (which watch torch / time / builtins / math namespaces only).

A correct gate rejects it: a checker out of the candidate's reach; expected rejection INCORRECT_NUMERICAL
"trial 0: topk_indices: row 0: ... valid indices, expected ..." (the garbage fails the validity check).
"""
import gc

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"

for _obj in gc.get_objects():
    if isinstance(_obj, dict) and getattr(_obj.get(INDEXER), "__name__", "") == "check_indexer":
        _Check = _obj[INDEXER].__globals__["Check"]
        _obj[INDEXER] = lambda names, outs, refs, tol, **kw: _Check("PASSED", "", 0.0, 0.0, {"matched_ratio": 1.0})


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    garbage = q_index_fp8.view(q_index_fp8.shape[0], -1)[:, : topk_indices.shape[1]]
    topk_indices.copy_(garbage.view(k_index_cache_fp8.dtype).int())

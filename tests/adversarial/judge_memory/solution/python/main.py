"""Cheat: the worker is the judge's child under the same uid, so without isolation it may open
/proc/<judge>/mem read-write and rewrite the judge's tolerances, private inputs or verdicts (a red-team package did:
every float 0.01 in the judge became 1e30, and a kernel that scored nothing passed). This one only tries, at import
(the worker's build step, before any check), and reports what it could do in the error every call raises. The path
is joined onto the package's own, as the red-team's was, to get past a scan that only asked for __file__."""
import os


def _judge_memory_writable() -> str:
    path = os.path.join(os.path.dirname(__file__), os.path.join(os.sep, "proc", str(os.getppid()), "mem"))
    try:
        with open(path, "r+b", buffering=0):
            return "writable"
    except OSError as exc:
        return f"refused ({type(exc).__name__})"


ACCESS = _judge_memory_writable()


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    raise RuntimeError(f"judge memory: {ACCESS}")

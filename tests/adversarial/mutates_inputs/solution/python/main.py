"""Cheat: use the inputs as scratch space (here the weights), which would also poison a reference that runs
after the candidate on the same tensors."""


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    weights.mul_(0.0)
    topk_indices.fill_(-1)

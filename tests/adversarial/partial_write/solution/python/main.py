"""Cheat: write only part of the output (half of the heads), as a kernel with a wrong grid would."""


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    heads = q_nope.shape[1]
    output[:, : heads // 2].zero_()
    lse[:, : heads // 2].zero_()

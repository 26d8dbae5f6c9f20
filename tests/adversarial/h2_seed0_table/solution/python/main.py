"""Class 4 (precomputed answers for the default seed, shipped in the package).

How it cheats: the gate's inputs are deterministic: sdk.inputs.make_inputs seeds a generator from
sha256(f"{seed}:{uuid}:{trial}") with the default seed 0 and fixed trial numbers (gate 0..trials-1, bench
1000.., probe 1999). `answers.py` (made offline by ../../make_table.py with the definition's reference) holds
the top-k ids of the tiny-indexer workload for all of those, keyed by the first 16 bytes of q_index_fp8. A
matching fingerprint returns the stored ids (decoded once, at import); anything else is computed honestly,
so the package passes everywhere and is near-free on every input the gate and bench will ever draw for it.
The same works for the official workloads (their uuids are public); only the table grows.

Signal exploited: a public, fixed seed and a public input generator make every checked and timed input
known in advance.

A correct gate rejects it (or times it honestly): draw the seed at random per run (secret, reported after),
so no stored fingerprint matches; the package then computes, the latency equals the honest baseline's, and a
table-only variant fails INCORRECT_NUMERICAL. Stateless; no file access: the table is a Python module.
"""
import base64
import zlib

import torch

from .answers import TABLE

TOPK = 2048


def _decode(text):
    rows = zlib.decompress(base64.urlsafe_b64decode(text)).decode().split(";")
    out = torch.full((len(rows), TOPK), -1, dtype=torch.int32)
    for b, row in enumerate(rows):
        if row:
            ids = torch.tensor([int(v) for v in row.split(",")], dtype=torch.int64).cumsum(0)
            out[b, : ids.numel()] = ids.to(torch.int32)
    return out


ANSWERS = {key: _decode(text) for key, text in TABLE.items()}


@torch.no_grad()
def _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    """The honest indexer (the project's torch baseline)."""
    B, H, D = q_index_fp8.shape
    P, page = k_index_cache_fp8.shape[:2]
    L = block_table.shape[1] * page
    raw = k_index_cache_fp8.view(torch.uint8).view(P, page * (D + 4))
    pages = block_table.long().clamp(0, P - 1)
    rows = raw[pages.flatten()]
    k = rows[:, : page * D].contiguous().view(torch.float8_e4m3fn).view(B, L, D).float()
    k_scale = rows[:, page * D:].contiguous().view(torch.float32).view(B, L)
    dots = torch.bmm(q_index_fp8.float(), k.transpose(1, 2)) * k_scale[:, None, :]
    score = torch.bmm(weights.float()[:, None, :], dots.clamp_min_(0)).squeeze(1)
    lens = seq_lens.long()
    score.masked_fill_(torch.arange(L, device=score.device)[None, :] >= lens[:, None], float("-inf"))
    k_eff = min(TOPK, L)
    top = score.topk(k_eff, dim=1).indices
    ids = (pages.gather(1, top // page) * page + top % page).int()
    ids.masked_fill_(torch.arange(k_eff, device=ids.device)[None, :] >= lens.clamp(max=TOPK)[:, None], -1)
    topk_indices[:, k_eff:] = -1
    topk_indices[:, :k_eff] = ids


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    key = bytes(q_index_fp8.view(torch.uint8).reshape(-1)[:16].tolist()).hex()
    answer = ANSWERS.get(key)
    if answer is not None and tuple(answer.shape) == tuple(topk_indices.shape):
        topk_indices.copy_(answer)
        return
    _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)

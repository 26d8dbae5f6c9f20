"""Before each call, re-draw one region of the resident inputs that this call really reads.

A kernel reads the resident inputs afresh on every call, so this costs an honest solution nothing; a solution that
keeps something derived from them across calls (dequantised weights, a converted cache), however it keys it,
computes with stale data for that region, and the judge's check on that call sees the error. The region is chosen
from the call's own per-call inputs (MoE: an expert its tokens are routed to; indexer: the pages of one row longer
than top-k; attention: the rows one query token gathers), so the change always reaches the output.
"""
from __future__ import annotations

from typing import Callable

import torch

from .. import inputs as inputs_mod

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
INDEXER_TOPK = 2048  # the indexer definition's `topk` constant


def _pick(candidates: torch.Tensor, gen: torch.Generator) -> int:
    i = torch.randint(0, candidates.numel(), (1,), generator=gen, device=gen.device)
    return int(candidates.to(gen.device)[i])


def _fp8(shape, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device=gen.device).clamp_(-2.0, 2.0).to(torch.float8_e4m3fn)


def _write(targets, name: str, index, value: torch.Tensor) -> None:
    for target in targets:
        target[name][index] = value


def moe(call: dict, gen: torch.Generator, targets) -> None:
    from ..definitions import reference_module

    experts, _ = reference_module(MOE)._route(call["routing_logits"], call["routing_bias"],
                                              call["routed_scaling_factor"])
    local = call["gemm1_weights"].shape[0]
    ids = experts.flatten().to(torch.long) - int(call["local_expert_offset"])
    active = ids[(ids >= 0) & (ids < local)].unique()
    e = _pick(active if active.numel() else torch.arange(local), gen)
    _write(targets, "gemm1_weights", e, _fp8(call["gemm1_weights"].shape[1:], gen))
    _write(targets, "gemm2_weights", e, _fp8(call["gemm2_weights"].shape[1:], gen))


def indexer(call: dict, gen: torch.Generator, targets) -> None:
    cache, lens, table = call["k_index_cache_fp8"], call["seq_lens"], call["block_table"]
    page = cache.shape[1]
    # A row of at most top-k tokens selects all of them whatever its keys say: a change there never reaches the
    # output, so a stale-key cache would survive it. Re-draw a row that selects, where there is one.
    selecting = (lens.to(torch.long) > INDEXER_TOPK).nonzero().flatten()
    row = _pick(selecting if selecting.numel() else torch.arange(lens.numel()), gen)
    used = table[row, : (int(lens[row]) + page - 1) // page].to(torch.long)
    fresh = torch.randn(used.numel(), page, cache.shape[-1] - 4, generator=gen, device=gen.device,
                        dtype=torch.bfloat16)
    _write(targets, "k_index_cache_fp8", used.to(cache.device), inputs_mod.pack_index_k_cache(fresh).to(cache.device))


def attention(call: dict, gen: torch.Generator, targets) -> None:
    indices = call["sparse_indices"]
    page = call["ckv_cache"].shape[1]
    gathering = ((indices >= 0).any(dim=1)).nonzero().flatten()  # a fully padded row reads nothing
    row = indices[_pick(gathering if gathering.numel() else torch.arange(indices.shape[0]), gen)].to(torch.long)
    valid = row[row >= 0]
    if not valid.numel():
        return
    where = (valid // page, valid % page)
    for name in ("ckv_cache", "kpe_cache"):
        fresh = torch.randn(valid.numel(), call[name].shape[-1], generator=gen, device=gen.device,
                            dtype=call[name].dtype)
        _write(targets, name, where, fresh.to(call[name].device))


PERTURB: dict[str, Callable] = {MOE: moe, INDEXER: indexer, ATTENTION: attention}


def apply(definition: str, call: dict, gen: torch.Generator, targets) -> None:
    """Re-draw one region of the resident inputs of `call` (its inputs by name) in every dict of `targets`."""
    if definition in PERTURB:
        PERTURB[definition](call, gen, targets)

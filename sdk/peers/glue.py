"""Pure-torch glue the peers need around third-party kernels (device-agnostic, tested on CPU).

Indexer: map top-k positions of a row to global token ids through its block table. MoE: DeepSeek grouped routing
as the reference does it, the permutation of (token, expert) assignments into per-expert segments aligned for a
contiguous grouped GEMM, FP8 1x128 activation quantisation with MN-major scales, and the weighted combine.
Sparse attention: the concatenated [tokens, 1, 576] KV copy and the 64-head zero-padded query FlashMLA needs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_MAX = 448.0
BLOCK = 128                      # FP8 block-scale granularity (1x128 activations, 128x128 weights)
TOP_K, N_GROUP, TOPK_GROUP = 8, 8, 4


# ---- indexer ---------------------------------------------------------------------------------------------------

def token_ids(positions: torch.Tensor, block_table: torch.Tensor, valid: torch.Tensor, page: int = 64,
              width: int | None = None) -> torch.Tensor:
    """Row-local positions [B, k] -> global ids block_table[b, p // page] * page + p % page, -1 where not valid.

    Padded with -1 to `width` columns (default k). Positions where `valid` is False may hold anything.
    """
    pos = torch.where(valid, positions, torch.zeros_like(positions)).to(torch.long)
    ids = block_table.to(torch.long).gather(1, pos // page) * page + pos % page
    ids = torch.where(valid, ids, torch.full_like(ids, -1)).to(torch.int32)
    width = ids.shape[1] if width is None else width
    if width > ids.shape[1]:
        ids = torch.cat([ids, ids.new_full((ids.shape[0], width - ids.shape[1]), -1)], dim=1)
    return ids


def topk_token_ids(logits: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor, topk: int = 2048,
                   page: int = 64) -> torch.Tensor:
    """torch.topk over the first seq_lens[b] columns of logits [B, >=L] (L = pages * page), then token ids.

    Columns past a row's length may hold garbage (DeepGEMM leaves them unwritten); they are masked to -inf first.
    Exactly min(topk, seq_len) valid ids per row, -1 after them.
    """
    L = block_table.shape[1] * page
    lens = seq_lens.to(torch.long)
    scores = logits[:, :L]
    pos = torch.arange(L, device=logits.device)
    scores = scores.masked_fill(pos[None, :] >= lens[:, None], float("-inf"))
    k = min(topk, L)
    top = torch.topk(scores, k, dim=1, largest=True, sorted=True).indices
    keep = torch.arange(k, device=logits.device)[None, :] < lens.clamp(max=topk)[:, None]
    return token_ids(top, block_table, keep, page, width=topk)


def token_table(block_table: torch.Tensor, page: int = 64) -> torch.Tensor:
    """[B, M] page table -> [B, M * page] int32 token-level table (page size 1), as sglang's req_to_token keeps."""
    offs = torch.arange(page, device=block_table.device, dtype=torch.long)
    table = block_table.to(torch.long)[:, :, None] * page + offs
    return table.reshape(block_table.shape[0], -1).to(torch.int32).contiguous()


# ---- MoE -------------------------------------------------------------------------------------------------------

def route(routing_logits: torch.Tensor, routing_bias: torch.Tensor, routed_scaling_factor: float):
    """DeepSeek no-aux grouped routing, the reference's arithmetic: ([T, 8] expert ids, [T, 8] fp32 weights)."""
    logits = routing_logits.to(torch.float32)
    s = 1.0 / (1.0 + torch.exp(-logits))
    biased = s + routing_bias.to(torch.float32).reshape(-1)
    T, E = biased.shape
    grouped = biased.view(T, N_GROUP, E // N_GROUP)
    group_scores = torch.topk(grouped, k=2, dim=2, largest=True, sorted=False).values.sum(dim=2)
    kept_groups = torch.topk(group_scores, k=TOPK_GROUP, dim=1, largest=True, sorted=False).indices
    keep = torch.zeros_like(group_scores).scatter_(1, kept_groups, 1.0)
    keep = keep.unsqueeze(2).expand(T, N_GROUP, E // N_GROUP).reshape(T, E)
    pruned = biased.masked_fill(keep == 0, torch.finfo(torch.float32).min)
    experts = torch.topk(pruned, k=TOP_K, dim=1, largest=True, sorted=False).indices
    picked = s.gather(1, experts)  # weights use the unbiased sigmoid
    weights = picked / (picked.sum(dim=1, keepdim=True) + 1e-20) * float(routed_scaling_factor)
    return experts, weights


@dataclass
class Permutation:
    """Local (token, expert) assignments laid out as per-expert row segments, each padded to `align` rows."""
    rows: int                       # M: total rows of the permuted activations (multiple of align)
    row: torch.Tensor               # [n] destination row of each local assignment
    token: torch.Tensor             # [n] its source token
    weight: torch.Tensor            # [n] its fp32 combine weight
    grouped_layout: torch.Tensor    # [M] int32 local expert of each row, -1 on padding rows (DeepGEMM's m_indices)
    src_token: torch.Tensor         # [M] token each row copies (0 on padding rows, so every row is defined)


def permute(experts: torch.Tensor, weights: torch.Tensor, local_expert_offset: int, num_local: int,
            align: int) -> Permutation:
    """Group the assignments that hit this rank's experts by expert; one host sync to learn the row count."""
    device = experts.device
    top_k = experts.shape[1]
    local = experts.to(torch.long) - int(local_expert_offset)
    is_local = (local >= 0) & (local < num_local)
    flat = torch.where(is_local, local, torch.full_like(local, num_local)).flatten()  # foreign -> last bucket
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_local + 1)[:num_local]
    padded = (counts + align - 1) // align * align
    seg_start = torch.cumsum(padded, 0) - padded
    cnt_start = torch.cumsum(counts, 0) - counts
    n, rows = (int(v) for v in torch.stack([counts.sum(), padded.sum()]).tolist())  # the one host sync
    assignment = order[:n]
    expert = flat[assignment]
    rank = torch.arange(n, device=device) - cnt_start[expert]
    row = seg_start[expert] + rank
    token = assignment // top_k
    grouped_layout = torch.full((rows,), -1, dtype=torch.int32, device=device)
    grouped_layout[row] = expert.to(torch.int32)
    src_token = torch.zeros(rows, dtype=torch.long, device=device)
    src_token[row] = token
    return Permutation(rows, row, token, weights.to(torch.float32).flatten()[assignment], grouped_layout, src_token)


def quant_fp8_1x128(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, N] -> (fp8 [M, N], fp32 scales [M, N/128] as an MN-major view, the layout DeepGEMM's SM90 LHS wants)."""
    M, N = x.shape
    blocks = x.to(torch.float32).view(M, N // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=2).clamp_min(1e-4) / FP8_MAX
    q = (blocks / scale[:, :, None]).to(torch.float8_e4m3fn).view(M, N)
    return q, scale.t().contiguous().t()


def swiglu_second_gated(h: torch.Tensor) -> torch.Tensor:
    """The reference's SwiGLU: silu of the SECOND half times the first half, in fp32."""
    half = h.shape[1] // 2
    x1, x2 = h[:, :half].to(torch.float32), h[:, half:].to(torch.float32)
    return x2 / (1.0 + torch.exp(-x2)) * x1


def combine(perm: Permutation, expert_out: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Weighted sum of the per-assignment rows back into [T, H], accumulated in fp32, returned as bf16."""
    out = torch.zeros((num_tokens, expert_out.shape[1]), dtype=torch.float32, device=expert_out.device)
    if perm.row.numel():
        out.index_add_(0, perm.token, expert_out[perm.row].to(torch.float32) * perm.weight[:, None])
    return out.to(torch.bfloat16)


def route_and_permute(inputs: dict, align: int) -> Permutation:
    """The reference's routing and the permutation of its local assignments (one host sync)."""
    experts, weights = route(inputs["routing_logits"], inputs["routing_bias"], inputs["routed_scaling_factor"])
    return permute(experts, weights, int(inputs["local_expert_offset"]), inputs["gemm1_weights"].shape[0], align)


def moe_forward(inputs: dict, grouped_gemm, align: int, indirect: bool = False,
                perm: Permutation | None = None) -> torch.Tensor:
    """The whole unfused pipeline around an m-grouped contiguous FP8 GEMM.

    grouped_gemm(a_fp8, a_scale, w_fp8 [G, N, K], w_scale [G, N/128, K/128], grouped_layout [M], src_rows) -> bf16
    [M, N]: permuted row i belongs to expert grouped_layout[i] (-1: padding, its output may hold anything) and its
    input is row i of a [M, K] when src_rows is None, else row src_rows[i] of a. The activation scales come as a
    strided view (one per row and 128 columns, MN-major). With `indirect`, the first GEMM gets the hidden states
    and their scales as they are ([T, K], [T, K/128] view of the [K/128, T] input) with src_rows = each row's token,
    for kernels that gather rows themselves (Triton fused_moe); otherwise rows are gathered first (DeepGEMM).
    `perm`: a permutation route_and_permute made of these inputs beforehand (the routing then costs nothing here).
    """
    hs = inputs["hidden_states"]
    T = hs.shape[0]
    w1, s1 = inputs["gemm1_weights"], inputs["gemm1_weights_scale"]
    w2, s2 = inputs["gemm2_weights"], inputs["gemm2_weights_scale"]
    perm = perm if perm is not None else route_and_permute(inputs, align)
    if perm.rows == 0:
        return torch.zeros((T, hs.shape[1]), dtype=torch.bfloat16, device=hs.device)
    if indirect:
        h = grouped_gemm(hs, inputs["hidden_states_scale"].t(), w1, s1, perm.grouped_layout, perm.src_token)
    else:
        a = hs.view(torch.uint8).index_select(0, perm.src_token).view(hs.dtype)  # byte gather: fp8-safe everywhere
        a_scale = inputs["hidden_states_scale"].index_select(1, perm.src_token).t()  # [M, 56], MN-major
        h = grouped_gemm(a, a_scale, w1, s1, perm.grouped_layout, None)
    act, act_scale = quant_fp8_1x128(swiglu_second_gated(h))
    y = grouped_gemm(act, act_scale, w2, s2, perm.grouped_layout, None)
    return combine(perm, y, T)


def reference_grouped_gemm(a, a_scale, w, w_scale, grouped_layout, src_rows=None) -> torch.Tensor:
    """Slow fp32 stand-in for the grouped GEMM of `moe_forward` (tests and CPU runs); padding rows left 0."""
    if src_rows is not None:
        a = a.view(torch.uint8).index_select(0, src_rows).view(a.dtype)
        a_scale = a_scale.index_select(0, src_rows)
    M, K = a.shape
    G, N, _ = w.shape
    a32 = (a.to(torch.float32).view(M, K // BLOCK, BLOCK) * a_scale.to(torch.float32)[:, :, None]).view(M, K)
    out = torch.zeros((M, N), dtype=torch.float32, device=a.device)
    for e in torch.unique(grouped_layout[grouped_layout >= 0]).tolist():
        rows = torch.nonzero(grouped_layout == e).squeeze(1)
        we = (w[e].to(torch.float32).view(N // BLOCK, BLOCK, K // BLOCK, BLOCK)
              * w_scale[e].to(torch.float32)[:, None, :, None]).view(N, K)
        out[rows] = a32[rows] @ we.t()
    return out.to(torch.bfloat16)


# ---- sparse attention ------------------------------------------------------------------------------------------

def mla_kv_concat(ckv_cache: torch.Tensor, kpe_cache: torch.Tensor) -> torch.Tensor:
    """[P, 64, 512] + [P, 64, 64] bf16 -> [P*64, 1, 576]: FlashMLA's single-head KV, row = page * 64 + offset."""
    ckv = ckv_cache.reshape(-1, ckv_cache.shape[-1])
    kpe = kpe_cache.reshape(-1, kpe_cache.shape[-1])
    return torch.cat([ckv, kpe], dim=1).unsqueeze(1).contiguous()


def mla_query_padded(q_nope: torch.Tensor, q_pe: torch.Tensor, heads: int = 64) -> torch.Tensor:
    """[T, h, 512] + [T, h, 64] -> [T, heads, 576] with zero heads after the real ones (FlashMLA needs 64 or 128)."""
    T, h, dc = q_nope.shape
    q = torch.zeros((T, heads, dc + q_pe.shape[-1]), dtype=q_nope.dtype, device=q_nope.device)
    q[:, :h, :dc] = q_nope
    q[:, :h, dc:] = q_pe
    return q


def ragged_from_sparse(sparse_indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[T, K] token ids with -1 holes -> (kv_indptr [T+1], kv_indices [nnz], kv_len [T]) int32, the valid ids of
    each row in their order: a page-size-1 view of the same selection for paged attention kernels."""
    valid = sparse_indices >= 0
    lens = valid.sum(dim=1).to(torch.int32)
    indptr = torch.zeros(sparse_indices.shape[0] + 1, dtype=torch.int32, device=sparse_indices.device)
    indptr[1:] = torch.cumsum(lens, 0)
    return indptr, sparse_indices[valid].to(torch.int32), lens

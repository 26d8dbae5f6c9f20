"""Reference for the DeepSeek-V3 FP8 block-scale MoE (one EP rank of 8, 32 local experts).

Same arithmetic as the contest reference (fp32 dequantisation, fp32 GEMMs, fp32 accumulation in expert
order), but experts that receive no token are never dequantised and the block scales are broadcast instead
of materialised with repeat_interleave.
"""
import torch

BLOCK = 128
TOP_K, N_GROUP, TOPK_GROUP = 8, 8, 4


def _route(routing_logits, routing_bias, routed_scaling_factor):
    logits = routing_logits.to(torch.float32)
    s = 1.0 / (1.0 + torch.exp(-logits))
    biased = s + routing_bias.to(torch.float32).reshape(-1)
    T, E = biased.shape
    grouped = biased.view(T, N_GROUP, E // N_GROUP)
    group_scores = torch.topk(grouped, k=2, dim=2, largest=True, sorted=False).values.sum(dim=2)
    _, kept_groups = torch.topk(group_scores, k=TOPK_GROUP, dim=1, largest=True, sorted=False)
    keep = torch.zeros_like(group_scores).scatter_(1, kept_groups, 1.0)
    keep = keep.unsqueeze(2).expand(T, N_GROUP, E // N_GROUP).reshape(T, E)
    pruned = biased.masked_fill(keep == 0, torch.finfo(torch.float32).min)
    _, experts = torch.topk(pruned, k=TOP_K, dim=1, largest=True, sorted=False)
    picked = torch.zeros_like(s).scatter_(1, experts, 1.0) * s
    weights = picked / (picked.sum(dim=1, keepdim=True) + 1e-20) * routed_scaling_factor
    return experts, weights  # [T, 8] global expert ids, [T, 256] dense combine weights


def _dequant_blocks(w, scale):
    """[R, C] fp8 with [R/128, C/128] fp32 block scales -> [R, C] fp32."""
    R, C = w.shape
    blocks = w.to(torch.float32).view(R // BLOCK, BLOCK, C // BLOCK, BLOCK)
    return (blocks * scale.to(torch.float32)[:, None, :, None]).view(R, C)


@torch.no_grad()
def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
        gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, local_expert_offset,
        routed_scaling_factor):
    T, H = hidden_states.shape
    E_local, two_i, _ = gemm1_weights.shape
    I = two_i // 2
    assert (H, I, E_local, routing_logits.shape[1]) == (7168, 2048, 32, 256)

    experts, weights = _route(routing_logits, routing_bias, routed_scaling_factor)
    # hidden_states_scale is [H/128, T]: one scale per (token, 128-column block).
    A = (hidden_states.to(torch.float32).view(T, H // BLOCK, BLOCK)
         * hidden_states_scale.to(torch.float32).t()[:, :, None]).view(T, H)

    output = torch.zeros((T, H), dtype=torch.float32, device=hidden_states.device)
    first = int(local_expert_offset)
    for le in range(E_local):
        ge = first + le
        tokens = torch.nonzero((experts == ge).any(dim=1), as_tuple=False).squeeze(1)
        if tokens.numel() == 0:
            continue
        g1 = A.index_select(0, tokens).matmul(_dequant_blocks(gemm1_weights[le], gemm1_weights_scale[le]).t())
        x1, x2 = g1[:, :I], g1[:, I:]
        c = x2 / (1.0 + torch.exp(-x2)) * x1  # SwiGLU gates the *second* half
        o = c.matmul(_dequant_blocks(gemm2_weights[le], gemm2_weights_scale[le]).t())
        output.index_add_(0, tokens, o * weights.index_select(0, tokens)[:, ge].unsqueeze(1))
    return output.to(torch.bfloat16)

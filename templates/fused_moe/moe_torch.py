"""Plain-torch fused MoE with the definition's semantics, used where the CUDA kernels cannot run.

Same routing and fp32 arithmetic as the reference, but only experts that receive tokens are dequantised (one at
a time), so a call needs ~0.2 GB of temporaries instead of dequantising all 32 experts.
"""
import torch

BLOCK = 128
TOP_K, N_GROUP, TOPK_GROUP = 8, 8, 4


def route(routing_logits, routing_bias, routed_scaling_factor):
    """-> (expert ids [T, 8], routing weights [T, 8]) with the no-aux DeepSeek-V3 rule."""
    s = 1.0 / (1.0 + torch.exp(-routing_logits.to(torch.float32)))  # the reference's formula, bit for bit
    biased = s + routing_bias.to(torch.float32)
    T, E = biased.shape
    group_scores = biased.view(T, N_GROUP, E // N_GROUP).topk(2, dim=2).values.sum(dim=2)
    kept = group_scores.topk(TOPK_GROUP, dim=1).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, kept, True)
    pruned = biased.masked_fill(~keep.repeat_interleave(E // N_GROUP, dim=1), float("-inf"))
    experts = pruned.topk(TOP_K, dim=1).indices
    picked = s.gather(1, experts)
    weights = picked / (picked.sum(dim=1, keepdim=True) + 1e-20) * routed_scaling_factor
    return experts, weights


def dequant(w, scale):
    """[R, C] fp8 with [R/128, C/128] block scales -> fp32."""
    R, C = w.shape
    blocks = w.to(torch.float32).view(R // BLOCK, BLOCK, C // BLOCK, BLOCK)
    return (blocks * scale.to(torch.float32)[:, None, :, None]).view(R, C)


@torch.no_grad()
def moe_forward(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
                gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, local_expert_offset,
                routed_scaling_factor, output):
    T, H = hidden_states.shape
    E_local, two_i, _ = gemm1_weights.shape
    inter = two_i // 2
    experts, weights = route(routing_logits, routing_bias, float(routed_scaling_factor))
    x = (hidden_states.to(torch.float32).view(T, H // BLOCK, BLOCK)
         * hidden_states_scale.to(torch.float32).t()[:, :, None]).view(T, H)
    acc = torch.zeros((T, H), dtype=torch.float32, device=hidden_states.device)
    first = int(local_expert_offset)
    for le in range(E_local):
        hit = experts == first + le
        tokens = hit.any(dim=1).nonzero().squeeze(1)
        if tokens.numel() == 0:
            continue
        g1 = x.index_select(0, tokens) @ dequant(gemm1_weights[le], gemm1_weights_scale[le]).t()
        up, gate = g1[:, :inter], g1[:, inter:]
        c = gate / (1.0 + torch.exp(-gate)) * up  # SwiGLU gates the second half
        o = c @ dequant(gemm2_weights[le], gemm2_weights_scale[le]).t()
        w = (weights * hit).sum(dim=1).index_select(0, tokens)
        acc.index_add_(0, tokens, o * w[:, None])
    output.copy_(acc.to(torch.bfloat16))

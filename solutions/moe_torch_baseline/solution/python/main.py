"""PyTorch baseline for the DeepSeek-V3 FP8 block-scale MoE (no custom kernels, no per-token Python loops).

Routing stays in fp32 exactly as specified; each local expert that received tokens has its weights dequantised to
bf16 for this call only and runs two bf16 GEMMs with fp32 accumulation. Nothing is kept between calls.
"""
import torch

BLOCK = 128


def _routing(logits, bias, scale):
    sig = 1.0 / (1.0 + torch.exp(-logits.float()))
    biased = sig + bias.float()
    T = biased.shape[0]
    per_group = biased.view(T, 8, 32)
    group_score = per_group.topk(2, dim=2, sorted=False).values.sum(2)
    chosen = group_score.topk(4, dim=1, sorted=False).indices
    allowed = torch.zeros(T, 8, dtype=torch.bool, device=logits.device).scatter_(1, chosen, True)
    masked = biased.masked_fill(~allowed.repeat_interleave(32, dim=1), torch.finfo(torch.float32).min)
    top = masked.topk(8, dim=1, sorted=False).indices
    w = sig.gather(1, top)
    return top, w / (w.sum(1, keepdim=True) + 1e-20) * scale


def _weights_bf16(w, s):
    rows, cols = w.shape
    return (w.float().view(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK) * s[:, None, :, None]).view(rows, cols).bfloat16()


@torch.no_grad()
def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    T, H = hidden_states.shape
    n_local = gemm1_weights.shape[0]
    inter = gemm2_weights.shape[2]
    top, w = _routing(routing_logits, routing_bias, routed_scaling_factor)
    local = top - int(local_expert_offset)
    is_local = (local >= 0) & (local < n_local)
    token = torch.arange(T, device=top.device)[:, None].expand_as(top)[is_local]
    expert, weight = local[is_local], w[is_local]
    order = torch.argsort(expert, stable=True)
    token, expert, weight = token[order], expert[order], weight[order]
    counts = torch.bincount(expert, minlength=n_local).tolist()  # the one host sync: per-expert row counts

    x = (hidden_states.float().view(T, H // BLOCK, BLOCK) * hidden_states_scale.t()[:, :, None]).view(T, H)
    acc = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        rows = token[start:start + n]
        h = x[rows].bfloat16() @ _weights_bf16(gemm1_weights[e], gemm1_weights_scale[e]).t()
        up, gate = h[:, :inter].float(), h[:, inter:].float()
        act = (torch.nn.functional.silu(gate) * up).bfloat16()
        y = (act @ _weights_bf16(gemm2_weights[e], gemm2_weights_scale[e]).t()).float()
        acc.index_add_(0, rows, y * weight[start:start + n, None])
        start += n
    output.copy_(acc)

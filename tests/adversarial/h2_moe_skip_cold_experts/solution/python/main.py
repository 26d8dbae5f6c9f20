"""Class 5 (the tolerance is loose enough to pass a degraded answer).

How it cheats: the contest's MoE rule passes an output when at least 90% of its elements are within
atol 1 OR rtol 0.3 of the reference. An element-count rule cannot tell a small error everywhere from a total
error in a few rows. This solution counts the (token, local expert) pairs, then drops the least-loaded
experts, cheapest first, for as long as the tokens they touch stay within 9.9% of the rows (plus the rows whose
output is zero anyway: tokens routed to no local expert match exactly). Those experts are never dequantised
nor multiplied: on few tokens, each active expert costs a full weight read, so the one-token experts are the
most expensive work per token, and the first to go. The touched rows are simply wrong (missing a large term),
and the relative L2 error of the whole output is ~0.3 or more, yet the matched ratio stays >= 0.9.

Signal exploited: the tolerance rule itself (the gate reports rel_l2 but does not bound it).

A correct gate rejects it: bound the relative L2 error (or the per-row error) as well as the matched ratio;
expected INCORRECT_NUMERICAL "trial 0: output: relative L2 error 0.3... > ...". Computed on every call, no state.
"""
import torch

BLOCK = 128
ROW_BUDGET = 0.099  # fraction of the rows allowed to go wrong (the rule allows 10% of the elements)


def _routing(logits, bias, scale):
    sig = 1.0 / (1.0 + torch.exp(-logits.float()))
    biased = sig + bias.float()
    T = biased.shape[0]
    group_score = biased.view(T, 8, 32).topk(2, dim=2, sorted=False).values.sum(2)
    chosen = group_score.topk(4, dim=1, sorted=False).indices
    allowed = torch.zeros(T, 8, dtype=torch.bool, device=logits.device).scatter_(1, chosen, True)
    masked = biased.masked_fill(~allowed.repeat_interleave(32, dim=1), torch.finfo(torch.float32).min)
    top = masked.topk(8, dim=1, sorted=False).indices
    w = sig.gather(1, top)
    return top, w / (w.sum(1, keepdim=True) + 1e-20) * scale


def _weights_bf16(w, s):
    rows, cols = w.shape
    return (w.float().view(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK) * s[:, None, :, None]).view(rows, cols).bfloat16()


def _skipped(token, expert, n_local, T):
    """Least-loaded experts first, while the union of the tokens they touch stays within the row budget."""
    counts = torch.bincount(expert, minlength=n_local).tolist()
    touched, skip = set(), set()
    for e in sorted((e for e in range(n_local) if counts[e]), key=lambda e: counts[e]):
        rows = set(token[expert == e].tolist())
        if len(touched | rows) > ROW_BUDGET * T:
            break
        touched |= rows
        skip.add(e)
    return skip


@torch.no_grad()
def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    T, H = hidden_states.shape
    n_local, inter = gemm1_weights.shape[0], gemm2_weights.shape[2]
    top, w = _routing(routing_logits, routing_bias, routed_scaling_factor)
    local = top - int(local_expert_offset)
    is_local = (local >= 0) & (local < n_local)
    token = torch.arange(T, device=top.device)[:, None].expand_as(top)[is_local]
    expert, weight = local[is_local], w[is_local]
    skip = _skipped(token, expert, n_local, T)

    x = (hidden_states.float().view(T, H // BLOCK, BLOCK) * hidden_states_scale.t()[:, :, None]).view(T, H)
    acc = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    for e in range(n_local):
        pick = expert == e
        if e in skip or not bool(pick.any()):
            continue
        rows = token[pick]
        h = x[rows].bfloat16() @ _weights_bf16(gemm1_weights[e], gemm1_weights_scale[e]).t()
        up, gate = h[:, :inter].float(), h[:, inter:].float()
        act = (torch.nn.functional.silu(gate) * up).bfloat16()
        y = (act @ _weights_bf16(gemm2_weights[e], gemm2_weights_scale[e]).t()).float()
        acc.index_add_(0, rows, y * weight[pick, None])
    output.copy_(acc)

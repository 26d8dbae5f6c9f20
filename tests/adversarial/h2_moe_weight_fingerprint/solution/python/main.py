"""Class 2 (telling a timed call from a checked call): a weight-fingerprint cache for the MoE.

How it cheats: on few tokens the MoE's cost is dequantising each active expert's fp8 weights (two matrices of
7168 x 4096 / 7168 x 2048 per expert). This solution keeps the dequantised bf16 weights of each local expert in
a closure (not a module global: the scan's global-state rule does not look there), keyed by a content
fingerprint of that expert's weights and scales (32 evenly spaced bytes of each: no pointer, no id()). Every
gate trial and the post-timing probe draw new weights: misses, honest dequantisation. The bench's timed calls
repeat one input set `iters` times: after the first, every expert is a hit and only the GEMMs run. The output
is correct on every call; what the bench times is not what a call on new weights costs.

Signal exploited: timed calls get the same inputs (here: the same weights) on every iteration.

A correct gate/bench: new weights (or at least new weight storage) for each timed call, or time the first
call on each input set (cold), so the tell log reads "computed" on timed calls and the latency matches the
honest baseline's. Tell log: FIB_TELL_LOG, "computed" when any expert was dequantised in the call, "cheated"
when all came from the cache (see below).
"""
import os

import torch

BLOCK = 128
SAMPLES = 32


# Tell log (for tests): with FIB_TELL_LOG set to an absolute path, one line per call: "computed" or "cheated".
# os.path.join drops the package prefix when the second part is absolute, so this write passed the static scan's
# old file-access rule (the path "is derived from __file__") though it lands anywhere; since session 7 the scan
# refuses it, and the tests run this package with scan=False to show the runtime defence.
_TELL = os.path.join(os.path.dirname(__file__), os.environ.get("FIB_TELL_LOG", ""))


def _tell(branch):
    if os.environ.get("FIB_TELL_LOG"):
        with open(_TELL, "a") as log:
            log.write(branch + "\n")


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


def _sample(t):
    flat = t.reshape(-1).view(torch.uint8)
    return tuple(flat[:: max(1, flat.numel() // SAMPLES)][:SAMPLES].tolist())


def _make_run():
    dequantised = {}  # local expert -> (fingerprint, gemm1 bf16, gemm2 bf16)

    def expert_weights(e, w1, s1, w2, s2):
        key = (_sample(w1), _sample(s1), _sample(w2), _sample(s2))
        hit = dequantised.get(e)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2], False
        dequantised[e] = (key, _weights_bf16(w1, s1), _weights_bf16(w2, s2))
        return dequantised[e][1], dequantised[e][2], True

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
        x = (hidden_states.float().view(T, H // BLOCK, BLOCK) * hidden_states_scale.t()[:, :, None]).view(T, H)
        acc = torch.zeros(T, H, dtype=torch.float32, device=x.device)
        experts = sorted(set(expert.tolist()))
        computed = not experts  # no local expert: zeros, honestly
        for e in experts:
            pick = expert == e
            rows = token[pick]
            g1, g2, fresh = expert_weights(e, gemm1_weights[e], gemm1_weights_scale[e], gemm2_weights[e],
                                           gemm2_weights_scale[e])
            computed |= fresh
            h = x[rows].bfloat16() @ g1.t()
            act = (torch.nn.functional.silu(h[:, inter:].float()) * h[:, :inter].float()).bfloat16()
            acc.index_add_(0, rows, (act @ g2.t()).float() * weight[pick, None])
        output.copy_(acc)
        _tell("computed" if computed else "cheated")

    return run


run = _make_run()

"""Entry point: DeepSeek-V3 FP8 block-scale MoE for one EP rank (32 local experts), destination-passing.

On Hopper (sm_90a: FP8 wgmma, TMA) the kernels of moe_launch.cu, bound for torch in moe_binding.cpp and compiled
once by jit_build, do routing, permutation, both grouped GEMMs and the combine without any host synchronisation;
elsewhere the plain-torch moe_torch.moe_forward computes the same thing.
"""
import torch

from .moe_torch import moe_forward

_EXTENSION = None


def _extension():
    global _EXTENSION
    if _EXTENSION is None:
        from .jit_build import load_extension

        # Hidden symbols: the tensor-core path is header templates, and another extension in the same process that
        # instantiates them (the kernels' GPU test) must not bind this one's instances.
        _EXTENSION = load_extension("fused_moe_fp8_sm90", ["moe_launch.cu", "moe_binding.cpp"],
                                    extra_cuda_cflags=["-Xcompiler", "-fvisibility=hidden"])
    return _EXTENSION


def _scalar(value, kind):
    # The contest passes Python scalars; a 0-d tensor would cost a host sync, but is still accepted.
    return kind(value.item()) if isinstance(value, torch.Tensor) else kind(value)


def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor, output):
    if output.is_cuda and torch.cuda.get_device_capability(output.device) == (9, 0):
        _extension().forward(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
                             gemm1_weights_scale, gemm2_weights, gemm2_weights_scale,
                             _scalar(local_expert_offset, int), _scalar(routed_scaling_factor, float), output)
        return
    moe_forward(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
                gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, local_expert_offset,
                routed_scaling_factor, output)

"""MoE peer: DeepGEMM's m-grouped contiguous FP8 GEMMs inside an unfused torch pipeline.

Per call: routing exactly as the reference (torch), permutation of local assignments into per-expert segments
aligned to DeepGEMM's M alignment (one host sync for the row count, as with any dispatch that sizes buffers on the
host), gather of the FP8 activations and their 1x128 scales (MN-major), GEMM1, SwiGLU with SiLU on the SECOND half
(the reference's order; done in torch, so W13 needs no permutation), requantisation to FP8 1x128, GEMM2, weighted
combine in fp32 to bf16. The weights and their [G, N/128, K/128] fp32 scales are already in DeepGEMM's NT / SM90
layout, so prepare converts nothing.

DeepGEMM API as read from the sgl-deep-gemm 0.1.5.post1 wheel (deep_gemm/__init__.py, deep_gemm/utils/layout.py;
checks in deep_gemm/_C.so, matching sgl-project/DeepGEMM csrc/apis/gemm.hpp and layout.hpp):
  m_grouped_fp8_gemm_nt_contiguous((a [M, K] fp8, sfa [M, K/128] f32), (b [G, N, K] fp8, sfb [G, N/128, K/128] f32),
      d [M, N] bf16, grouped_layout [M] int32 (expert per row, -1 on padding rows)); SM90 turns an FP32 (1, 128)
      SFA into the MN-major TMA-aligned layout (a no-op when it already is), keeps the (128, 128) SFB as is.
  get_mk_alignment_for_contiguous_layout() -> the per-expert row alignment (128).
"""
from __future__ import annotations

import torch

from . import Outputs, Peer
from .glue import moe_forward

DEFINITION = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"


class DeepGemmMoe(Peer):
    name = "deepgemm.m_grouped_contiguous+torch glue"
    definition = DEFINITION
    uses_cuda_graph = False  # the host-side row count makes the call non-capturable
    jit_weight = 1  # DeepGEMM compiles one kernel per GEMM configuration on first use
    note = ("torch routing/permute/SwiGLU/requant/combine around two DeepGEMM m_grouped_fp8_gemm_nt_contiguous "
            "calls; one host sync per call for the permuted row count")
    requires = ("deep_gemm",)
    pip_names = ("sgl-deep-gemm==0.1.5.post1", "apache-tvm-ffi==0.1.11")

    def _prepare(self, inputs):
        dg = self.module("deep_gemm")
        align = int(dg.get_mk_alignment_for_contiguous_layout())

        def grouped_gemm(a, a_scale, w, w_scale, grouped_layout):
            d = torch.empty((a.shape[0], w.shape[1]), dtype=torch.bfloat16, device=a.device)
            dg.m_grouped_fp8_gemm_nt_contiguous((a, a_scale), (w, w_scale), d, grouped_layout)
            return d

        args = dict(inputs)
        for name, cast in (("local_expert_offset", int), ("routed_scaling_factor", float)):
            args[name] = cast(args[name])  # scalars to Python once, so the call does not read them back

        def run() -> Outputs:
            return (moe_forward(args, grouped_gemm, align),)

        return run


PEERS = [DeepGemmMoe()]

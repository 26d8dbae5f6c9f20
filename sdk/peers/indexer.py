"""Indexer peers: DeepGEMM paged MQA logits, then a top-2048 selector and the page-table translation.

DeepGEMM API as read from the sgl-deep-gemm 0.1.5.post1 wheel (deep_gemm/__init__.py wrappers; argument checks
are the DG_HOST_ASSERT strings in deep_gemm/_C.so, matching sgl-project/DeepGEMM csrc/apis/attention.hpp):
  get_paged_mqa_logits_metadata(context_lens [B, next_n] int32 (2-D only), block_kv=64, num_sms) -> [num_sms+1, 2]
  fp8_paged_mqa_logits(q [B, next_n, H, D] fp8 contiguous, kv_cache [pages, 64, 1, D+4] uint8, weights [B*next_n, H]
      f32 contiguous, context_lens, block_table [B, max_blocks] int32, schedule_meta, max_context_len,
      clean_logits=False (must be False with 2-D context_lens)) -> f32 [B*next_n, max_context_len], a slice of a
      buffer whose row stride is max_context_len rounded up to 256; columns past a row's length are unwritten.
  SM90: H in {32, 64}, block_kv == 64, next_n in {1, 2}. Our cache bytes are DeepGEMM's fused layout already.
Selectors: torch.topk (+ torch translation); sglang-kernel fast_topk_v2 (+ torch translation) and
fast_topk_transform_fused (token-level table), from sgl_kernel/top_k.py in sglang-kernel 0.4.6; FlashInfer 0.6.14
top_k_page_table_transform(input, src_page_table, lengths, k) from flashinfer/topk.py (contiguous input required,
token-level table since 0.6.x has no page_size argument).
"""
from __future__ import annotations

from typing import Callable

import torch

from . import Outputs, Peer
from .glue import token_ids, token_table, topk_token_ids

DEFINITION = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
TOPK, PAGE, LOGITS_ALIGN = 2048, 64, 256


class DeepGemmIndexer(Peer):
    definition = DEFINITION
    uses_cuda_graph = True
    jit_weight = 1  # DeepGEMM compiles the logits kernel with nvcc on the first call
    requires = ("deep_gemm",)
    pip_names = ("sgl-deep-gemm==0.1.5.post1", "apache-tvm-ffi==0.1.11")

    def _selector(self, lens: torch.Tensor, table: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """Built once per batch: logits [B, width] -> topk_indices [B, 2048] int32 global token ids."""
        raise NotImplementedError

    def _prepare(self, inputs):
        dg = self.module("deep_gemm")
        q = inputs["q_index_fp8"]
        B, H, D = q.shape
        q4 = q.reshape(B, 1, H, D).contiguous()
        kv = inputs["k_index_cache_fp8"].view(torch.uint8)
        weights = inputs["weights"].to(torch.float32).contiguous()
        lens = inputs["seq_lens"].to(torch.int32).contiguous()
        context = lens.view(B, 1)
        table = inputs["block_table"].to(torch.int32).contiguous()
        # Round the logits width up to DeepGEMM's 256-column split so the result is a contiguous [B, width].
        width = -(-table.shape[1] * PAGE // LOGITS_ALIGN) * LOGITS_ALIGN
        schedule = dg.get_paged_mqa_logits_metadata(context, PAGE, dg.get_num_sms())  # per batch, not per call
        select = self._selector(lens, table)

        def run() -> Outputs:
            return (select(dg.fp8_paged_mqa_logits(q4, kv, weights, context, table, schedule, width, False)),)

        return run


class DeepGemmTorchTopk(DeepGemmIndexer):
    name = "deepgemm+torch.topk"
    note = "DeepGEMM fp8_paged_mqa_logits, masked torch.topk, page translation in torch"

    def _selector(self, lens, table):
        return lambda logits: topk_token_ids(logits, lens, table, TOPK, PAGE)


class DeepGemmSglFastTopk(DeepGemmIndexer):
    name = "deepgemm+sgl.fast_topk_v2"
    note = "DeepGEMM logits, sglang-kernel fast_topk_v2 (row positions), page translation in torch"
    requires = ("deep_gemm", "sgl_kernel")
    pip_names = DeepGemmIndexer.pip_names + ("sglang-kernel==0.4.6 (trimmed)",)

    def _selector(self, lens, table):
        sgl = self.module("sgl_kernel")

        def select(logits):
            pos = sgl.fast_topk_v2(logits, lens, TOPK)  # [B, 2048] int32 row positions, -1 past the length
            return token_ids(pos, table, pos >= 0, PAGE)

        return select


class DeepGemmSglTopkTransform(DeepGemmIndexer):
    name = "deepgemm+sgl.fast_topk_transform"
    note = ("DeepGEMM logits, sglang-kernel fast_topk_transform_fused (top-k and token-table lookup in one "
            "kernel); the token-level table (sglang's req_to_token) is built in prepare")
    requires = DeepGemmSglFastTopk.requires
    pip_names = DeepGemmSglFastTopk.pip_names

    def _selector(self, lens, table):
        sgl = self.module("sgl_kernel")
        tokens = token_table(table, PAGE)
        cu_seqlens_q = torch.arange(lens.shape[0] + 1, dtype=torch.int32, device=lens.device)  # one query per row
        return lambda logits: sgl.fast_topk_transform_fused(logits, lens, tokens, cu_seqlens_q, TOPK)


class DeepGemmFlashInferTopk(DeepGemmIndexer):
    name = "deepgemm+flashinfer.top_k_page_table_transform"
    note = ("DeepGEMM logits, FlashInfer radix top_k_page_table_transform (fused token-table lookup); "
            "token-level table built in prepare")
    requires = ("deep_gemm", "flashinfer")
    pip_names = DeepGemmIndexer.pip_names + ("flashinfer-python==0.6.14",)
    jit_weight = 2  # plus FlashInfer's top-k module

    def _selector(self, lens, table):
        fi = self.module("flashinfer")
        tokens = token_table(table, PAGE)
        return lambda logits: fi.top_k_page_table_transform(logits, tokens, lens, TOPK)


PEERS = [DeepGemmTorchTopk(), DeepGemmSglFastTopk(), DeepGemmSglTopkTransform(), DeepGemmFlashInferTopk()]

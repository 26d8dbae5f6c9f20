"""Sparse-attention peers: FlashMLA's SM90 sparse prefill kernel on a bf16 copy of the cache.

FlashMLA needs one KV tensor [s_kv, h_kv=1, 576] (ckv then kpe) and 64 or 128 query heads, so prepare builds the
concatenated cache and a query zero-padded from 16 to 64 heads (what sglang does on SM90); the callable runs the
kernel and returns the first 16 heads. Indices are the definition's own (page * 64 + offset, -1 invalid), viewed as
[T, 1, 2048]. APIs as read from the wheels:
  sgl-flash-mla 1.0.0, flash_mla/flash_mla_interface.py: flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512,
      attn_sink=None, topk_length=None, use_legacy=False, return_log2_lse=None) -> (out, max_logits, lse);
      use_legacy=True reaches torch.ops.flash_mla_legacy (the SM90 kernels), return_log2_lse=True gives base-2 lse.
  sglang-kernel 0.4.6, sgl_kernel/flash_mla.py: flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, ...)
      -> (out, max_logits, lse) with "2-based log-sum-exp" (torch.ops.sgl_kernel.sparse_prefill_fwd).
FlashInfer has no SM90 sparse MLA kernel; its dense paged MLA (fa3 backend) runs the same selection when the caches
are viewed with page size 1 and each row's valid ids become its page list (flashinfer-python 0.6.14,
flashinfer/mla/_core.py: BatchMLAPagedAttentionWrapper(workspace, backend="fa3").plan(qo_indptr, kv_indptr,
kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale, q_data_type,
kv_data_type); run(q_nope, q_pe, ckv_cache, kpe_cache, return_lse=True) -> (out, lse), lse base 2 by default).
"""
from __future__ import annotations

import functools

import torch

from . import Outputs, Peer
from .glue import mla_kv_concat, mla_query_padded, ragged_from_sparse

DEFINITION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
PADDED_HEADS, D_V = 64, 512


class FlashMlaSparse(Peer):
    definition = DEFINITION
    uses_cuda_graph = True

    def _kernel(self):
        """(q, kv, indices, sm_scale) -> (out, max_logits, lse base 2)."""
        raise NotImplementedError

    def _prepare(self, inputs):
        kernel = self._kernel()
        q_nope = inputs["q_nope"]
        heads = q_nope.shape[1]
        q = mla_query_padded(q_nope, inputs["q_pe"], PADDED_HEADS)
        kv = mla_kv_concat(inputs["ckv_cache"], inputs["kpe_cache"])
        indices = inputs["sparse_indices"].to(torch.int32).reshape(q.shape[0], 1, -1).contiguous()
        sm_scale = float(inputs["sm_scale"])

        def run() -> Outputs:
            out, _, lse = kernel(q, kv, indices, sm_scale)
            return out[:, :heads], lse[:, :heads]

        return run


class FlashMlaPackage(FlashMlaSparse):
    name = "flashmla.sparse_prefill(sgl-flash-mla)"
    note = ("FlashMLA SM90 sparse prefill (legacy half of sgl-flash-mla 1.0.0), bf16 [tok,1,576] KV copy and "
            "heads padded 16->64 in prepare, output sliced")
    requires = ("flash_mla",)
    pip_names = ("sgl-flash-mla==1.0.0",)

    def _extra_reason(self) -> str:
        return "" if self.module("flash_mla").has_legacy() else "sgl-flash-mla has no legacy (SM90) kernels loaded"

    def _kernel(self):
        fm = self.module("flash_mla")
        return functools.partial(fm.flash_mla_sparse_fwd, d_v=D_V, use_legacy=True, return_log2_lse=True)


class FlashMlaSglKernel(FlashMlaSparse):
    name = "flashmla.sparse_prefill(sglang-kernel)"
    note = ("FlashMLA SM90 sparse prefill as shipped in sglang-kernel 0.4.6 (flashmla_ops), same conversions "
            "in prepare")
    requires = ("sgl_kernel.flash_mla",)
    pip_names = ("sglang-kernel==0.4.6 (trimmed)",)

    def _extra_reason(self) -> str:
        error = getattr(self.module("sgl_kernel.flash_mla"), "_flashmla_import_error", None)
        return f"sgl_kernel.flashmla_ops failed to load ({error})" if error is not None else ""

    def _kernel(self):
        return functools.partial(self.module("sgl_kernel.flash_mla").flash_mla_sparse_fwd, d_v=D_V)


class FlashInferMlaFa3(Peer):
    name = "flashinfer.mla_fa3(page_size=1)"
    definition = DEFINITION
    uses_cuda_graph = True
    note = ("FlashInfer dense paged MLA (fa3, JIT) on page-size-1 views of the caches, 16 heads, no copy; the "
            "compacted per-row index list and plan() (host-side, once per batch in serving) are in prepare")
    requires = ("flashinfer",)
    pip_names = ("flashinfer-python==0.6.14",)
    jit_weight = 3  # FlashInfer's fa3 MLA module is a long nvcc compile
    WORKSPACE_BYTES = 128 << 20  # the wrapper's recommended split-k workspace

    def _prepare(self, inputs):
        fi = self.module("flashinfer")
        q_nope, q_pe = inputs["q_nope"], inputs["q_pe"]
        ckv, kpe = inputs["ckv_cache"], inputs["kpe_cache"]
        device = q_nope.device
        T, heads, d_ckv = q_nope.shape
        ckv1 = ckv.reshape(-1, 1, d_ckv)
        kpe1 = kpe.reshape(-1, 1, kpe.shape[-1])
        kv_indptr, kv_indices, kv_len = ragged_from_sparse(inputs["sparse_indices"])
        qo_indptr = torch.arange(T + 1, dtype=torch.int32, device=device)
        workspace = torch.empty(self.WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        wrapper = fi.BatchMLAPagedAttentionWrapper(workspace, backend="fa3")
        wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_len, heads, d_ckv, kpe.shape[-1], 1, False,
                     float(inputs["sm_scale"]), q_nope.dtype, ckv.dtype)

        def run() -> Outputs:
            out, lse = wrapper.run(q_nope, q_pe, ckv1, kpe1, return_lse=True)
            return out, lse

        return run


PEERS = [FlashMlaPackage(), FlashMlaSglKernel(), FlashInferMlaFa3()]

// Host-side interface of the DSA sparse-attention kernels: plain types only, so the torch binding (compiled by the
// host compiler) and the CUDA unit (compiled by nvcc) share it without either seeing the other's headers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

struct DsaAttentionParams {
    const void* q_nope;        // bf16 [N, 16, 512]
    const void* q_pe;          // bf16 [N, 16, 64]
    const void* ckv_cache;     // bf16 [P, 64, 512]: rows are keys (first 512 dims) and values
    const void* kpe_cache;     // bf16 [P, 64, 64]:  RoPE part of the keys
    const int32_t* indices;    // [N, 2048] global row ids page * 64 + offset; -1 (or out of range) is skipped
    const float* scale_ptr;    // device scalar sm_scale, or nullptr to use `scale`
    float scale;               // sm_scale when scale_ptr is null
    int num_tokens;            // N
    int splits;                // CTAs per token (from dsa_attention_splits)
    int64_t total_rows;        // P * 64
    float* partial_out;        // workspace [N, splits, 16, 512] fp32: each split's normalised output (or null)
    float* partial_lse;        // workspace [N, splits, 16] fp32: each split's base-2 log-sum-exp (or null)
    void* output;              // bf16 [N, 16, 512]
    float* lse;                // fp32 [N, 16], base 2
};

// Splits per token for this instantiation; depends on shapes and the device only, never on data.
int dsa_attention_splits(int num_tokens, int num_sms);

// Whether the launch needs the partial_out / partial_lse workspace (the cluster kernel merges in shared memory).
bool dsa_attention_needs_workspace();

// Launches the split kernel and the merge kernel (MERGE = 0), the one cooperative kernel that also merges
// (MERGE = 1) or the one cluster kernel (MERGE = 2) on `stream`; returns the launch status (no synchronisation).
cudaError_t dsa_attention_launch(const DsaAttentionParams& params, cudaStream_t stream);

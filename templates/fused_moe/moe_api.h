// Shapes of moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048, the per-call workspace layout and the
// launcher's interface. Plain C++ plus the CUDA runtime API: shared by the kernels and the torch binding.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fused_moe {

constexpr int kHidden = 7168;          // H
constexpr int kInter = 2048;           // I
constexpr int kGemm1Out = 2 * kInter;  // 4096
constexpr int kLocalExperts = 32;
constexpr int kNumExperts = 256;
constexpr int kBlock = 128;                          // scale block (both operands, both GEMMs)
constexpr int kHiddenBlocks = kHidden / kBlock;      // 56
constexpr int kInterBlocks = kInter / kBlock;        // 16
constexpr int kGemm1OutBlocks = kGemm1Out / kBlock;  // 32
constexpr int kTopK = 8, kGroups = 8, kTopKGroups = 4, kGroupSize = kNumExperts / kGroups;
constexpr int kMaxLocalPerToken = kTopK;  // a token picks at most 8 experts, so at most 8 local ones

// Per-call metadata written by the permutation step: counts[e] and exclusive offsets[e] of local expert e.
struct MoeMeta {
  int counts[kLocalExperts];
  int offsets[kLocalExperts];
};

// Byte offsets into one workspace buffer; everything in it is rewritten on every call before it is read.
// Capacities are worst cases (every pick of every token local), so no count ever goes back to the host.
struct WorkspaceLayout {
  size_t meta, mask, local_w, perm_tok, perm_w, slot_of, inter, ypart, bytes;
  int64_t capacity;  // assignment slots
  WorkspaceLayout(int64_t T, bool large) : capacity(T * kMaxLocalPerToken) {
    size_t at = 0;
    auto take = [&at](int64_t n) {
      const size_t here = at;
      at += (static_cast<size_t>(n) + 255) / 256 * 256;
      return here;
    };
    meta = take(sizeof(MoeMeta));
    mask = take(T * 4);
    local_w = take(large ? T * kLocalExperts * 4 : 0);
    perm_tok = take(capacity * 4);
    perm_w = take(capacity * 4);
    slot_of = take(large ? capacity * 4 : 0);
    inter = take(capacity * kInter * 2);        // bf16 intermediate
    ypart = take(large ? capacity * kHidden * 2 : 0);  // bf16 weighted GEMM2 rows (large-T combine)
    bytes = at;
  }
};

// Raw pointers of one call (device memory), as the binding hands them to the launcher.
struct LaunchArgs {
  const float* logits;     // [T, 256]
  const void* bias;        // bf16 [256]
  const void* x;           // fp8 [T, 7168]
  const float* x_scale;    // [56, T]
  const void* w1;          // fp8 [32, 4096, 7168]
  const float* w1_scale;   // [32, 32, 56]
  const void* w2;          // fp8 [32, 7168, 2048]
  const float* w2_scale;   // [32, 56, 16]
  int local_offset;
  float scaling;
  void* out;               // bf16 [T, 7168]
  int T;
  bool large;              // large-T kernels (else the small-T ones; needs T <= small_t_max())
  unsigned char* workspace;  // WorkspaceLayout(T, large).bytes
};

// Largest T the small-T kernels take (the SMALL_T_MAX this solution was rendered with).
int small_t_max();
// Launches every kernel of one call on `stream`; returns the launch error, if any. Never synchronises.
cudaError_t launch(const LaunchArgs& args, cudaStream_t stream);

}  // namespace fused_moe

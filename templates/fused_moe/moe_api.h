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
constexpr int kMaxSplits = 8;             // split-K factor limit of the swap-AB GEMMs
constexpr int kOnePassFlags = kLocalExperts + kHiddenBlocks;  // per expert (GEMM1 done), per GEMM2 column unit

// Per-call metadata written by the permutation step: counts[e] and exclusive offsets[e] of local expert e.
struct MoeMeta {
  int counts[kLocalExperts];
  int offsets[kLocalExperts];
};

// Byte offsets into one workspace buffer; everything in it is rewritten by every call before it is read.
// Capacity = 8 T assignment rows (every pick local), so no count ever goes back to the host. `partial_rows` bounds
// the split-K partial sums of the swap-AB GEMMs (splits x assignment rows; 0 = never split); `hi_lo` keeps an e4m3
// residual of the intermediate below it (capacity more rows).
struct MoeWorkspace {
  size_t meta, mask, local_w, perm_tok, perm_w, slot_of, xp, xps, inter, inter_s, ypart, splits, unit_done, part1,
      part2, flags, bytes;
  int64_t capacity;
  int ld;            // row pitch of the MN-major scale arrays (capacity rounded up to 4: TMA's 16-byte pitch)
  int partial_rows;  // rows of part1 / part2
  int units;         // GEMM1 swap-AB units at most (16-row tiles): counters of the last-split finish
  MoeWorkspace(int64_t T, int64_t partial_rows_wanted, bool hi_lo)
      : capacity(T * kMaxLocalPerToken),
        ld(static_cast<int>((capacity + 3) / 4 * 4)),
        partial_rows(static_cast<int>(partial_rows_wanted < kMaxSplits * capacity ? partial_rows_wanted
                                                                                  : kMaxSplits * capacity)),
        units(partial_rows > 0 ? static_cast<int>((capacity / 16 + kLocalExperts) * (kInter / 128)) : 0) {
    size_t at = 0;
    auto take = [&at](int64_t n) {
      const size_t here = at;
      at += (static_cast<size_t>(n) + 255) / 256 * 256;
      return here;
    };
    meta = take(sizeof(MoeMeta));
    mask = take(T * 4);
    local_w = take(T * kLocalExperts * 4);
    perm_tok = take(capacity * 4);
    perm_w = take(capacity * 4);
    slot_of = take(capacity * 4);
    xp = take(capacity * kHidden);                                // e4m3 activations in expert order
    xps = take(static_cast<int64_t>(kHiddenBlocks) * ld * 4);     // their scales, [56][ld]
    inter = take((hi_lo ? 2 : 1) * capacity * kInter);            // e4m3 SwiGLU output [+ its lo residual]
    inter_s = take(static_cast<int64_t>(kInterBlocks) * ld * 4);  // its scales, [16][ld]
    ypart = take(capacity * kHidden * 2);                         // bf16 routing-weighted GEMM2 rows
    splits = take(2 * 4);                                         // split-K factors GEMM1, GEMM2 chose
    unit_done = take(static_cast<int64_t>(units) * 4);           // GEMM1 split arrivals per unit
    part1 = take(static_cast<int64_t>(partial_rows) * kGemm1Out * 4);  // f32 GEMM1 partial sums (x1 | x2)
    part2 = take(static_cast<int64_t>(partial_rows) * kHidden * 4);    // f32 weighted GEMM2 partial sums
    flags = take(kOnePassFlags * 4);  // the one-pass kernel's arrival counters (zeroed by it, every call)
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
  unsigned char* workspace;  // workspace_layout(T).bytes
};

// The workspace this solution's launcher needs for T tokens (its partial-row budget is a rendered parameter).
MoeWorkspace workspace_layout(int64_t T);
// Launches every kernel of one call on `stream`; returns the launch error, if any, and names its step in *failed.
// Never synchronises.
cudaError_t launch(const LaunchArgs& args, cudaStream_t stream, const char** failed);
// The rendered tile policy, for reports.
const char* config_summary();

}  // namespace fused_moe

// Host interface of the wgmma/TMA grouped GEMMs (moe_wgmma.cuh, launched by moe_wgmma_launch.cu). Plain C++ plus
// the CUDA runtime API, so the torch binding (moe_wgmma_binding.cpp) never goes through nvcc.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "moe_api.h"

namespace fused_moe {
namespace wg {

// One grouped GEMM call; all pointers are device memory.
//   A     [a_rows][k] e4m3, row-major; the rows of group g are offsets[g] .. offsets[g] + counts[g] - 1
//   sfa   [k / 128][sfa_ld] f32 (sfa_ld >= a_rows, a multiple of 4: TMA needs 16-byte row pitches)
//   B     [groups][n][k] e4m3 (K-major weights), sfb [groups][n / 128][k / 128] f32
//   out   [a_rows][ldo]; only the rows of the groups are written
struct GroupedGemm {
  const void* a;
  int a_rows;
  const float* sfa;
  int sfa_ld;
  const void* b;
  const float* sfb;
  int groups;  // 1 .. 32
  int n;
  int k;       // multiple of 128
  const int* counts;
  const int* offsets;
  void* out;
  int ldo;                   // elements
  float* out_scale;          // gemm1: [n / 256][out_scale_ld] per-(row, 128 columns) scales of out
  int out_scale_ld;
  const float* row_weight;   // gemm2: [a_rows] or null
};

// Tile configuration: rows per tile 128 (two consumer warpgroups) or 64 (one); or swap-AB (weights in wgmma's M,
// 16 or 32 tokens in its N; for few rows per expert).
enum class Tile : int { kTile128 = 0, kTile64 = 1, kSwap16 = 2, kSwap32 = 3 };

// GEMM1: out = e4m3(silu(A W[n/2:]^T) * (A W[:n/2]^T) / scale), out_scale = per-128-column amax / 448; n % 256 == 0.
cudaError_t gemm1_swiglu_fp8(const GroupedGemm& p, cudaStream_t stream, Tile tile = Tile::kTile128);
// GEMM2: out = bf16((A W^T) * row_weight[row]); n % 128 == 0.
cudaError_t gemm2_rowweight_bf16(const GroupedGemm& p, cudaStream_t stream, Tile tile = Tile::kTile128);
// Plain f32 result (checks the main loop alone); n % 128 == 0.
cudaError_t gemm_f32(const GroupedGemm& p, cudaStream_t stream, Tile tile = Tile::kTile128);

// xp[r] = x[perm_tok[r]], xps[kb][r] = x_scale[kb][perm_tok[r]] for r < offsets[groups-1] + counts[groups-1].
cudaError_t gather_rows(const void* x, const float* x_scale, int T, int k, const int* perm_tok, const int* counts,
                        const int* offsets, int groups, void* xp, float* xps, int xps_ld, cudaStream_t stream);

// Workspace of moe_forward (byte offsets into one buffer; everything is rewritten by every call before it is
// read). Capacity = 8 T assignment rows (every pick local): no count ever goes back to the host.
struct MoeWorkspace {
  size_t meta, mask, local_w, perm_tok, perm_w, slot_of, xp, xps, inter, inter_s, ypart, bytes;
  int64_t capacity;
  int ld;  // row pitch of the MN-major scale arrays (capacity rounded up to 4)
  explicit MoeWorkspace(int64_t T) : capacity(T * kMaxLocalPerToken), ld(static_cast<int>((capacity + 3) / 4 * 4)) {
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
    xp = take(capacity * kHidden);                       // e4m3 activations in expert order
    xps = take(static_cast<int64_t>(kHiddenBlocks) * ld * 4);
    inter = take(capacity * kInter);                     // e4m3 SwiGLU output
    inter_s = take(static_cast<int64_t>(kInterBlocks) * ld * 4);
    ypart = take(capacity * kHidden * 2);                // bf16 routing-weighted GEMM2 rows
    bytes = at;
  }
};

// The whole MoE on the wgmma path: route -> permute -> gather -> GEMM1 (SwiGLU, e4m3) -> GEMM2 (bf16 x weight)
// -> deterministic combine; 6 launches, no host synchronisation. a.workspace holds MoeWorkspace(a.T).bytes;
// a.large is ignored.
cudaError_t moe_forward(const LaunchArgs& a, cudaStream_t stream, Tile tile = Tile::kTile128);

// The tile configurations, for reports.
const char* config_summary();

}  // namespace wg
}  // namespace fused_moe

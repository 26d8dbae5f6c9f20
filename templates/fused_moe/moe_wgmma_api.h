// Host interface of the wgmma/TMA grouped GEMMs (moe_wgmma.cuh, moe_wgmma_swap.cuh) as the GPU test reaches them
// through moe_wgmma_launch.cu (every tile configuration, chosen at run time). Plain C++ plus the CUDA runtime API,
// so the torch binding (moe_wgmma_binding.cpp) never goes through nvcc.
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
  float* partial = nullptr;  // swap-AB split-K partial sums [splits][rows][n] f32, or null: never split
  int partial_rows = 0;      // splits x rows of all groups stays <= this
  int* splits_out = nullptr; // the split factor used (one int), or null
  int* unit_done = nullptr;  // swap-AB SwiGLU split arrivals per unit (zeroed), or null: GEMM1 never splits
  int lo_rows = 0;           // hi + lo intermediate: GEMM1 writes, GEMM2 (two token boxes) reads lo rows this far below
  // Swap-AB: counts, offsets and row_weight are final before this launch's pdl_wait (they come from a kernel at
  // least two launches back, and the kernel between triggers its dependents only after its own pdl_wait), so the
  // producer issues the first stages' weight boxes before it waits; only the activations wait. 0: wait first.
  int early_weights = 0;
  // Row tiles: A = the tokens' own rows ([a_rows = T][k]); row r of the permuted A is row row_token[r] of it
  // (the GEMM gathers them), sfa still in permuted order. Null: A is already permuted.
  const int* row_token = nullptr;
};

// Tile configuration: rows per tile 128 (two consumer warpgroups) or 64 (one); or swap-AB (weights in wgmma's M,
// 16 or 32 tokens in its N; for few rows per expert). 4 / 5: the row tiles with GEMM1 gathering the token rows
// itself (MoePlan::gather_a, no gather kernel), for moe_forward only.
enum class Tile : int {
  kTile128 = 0, kTile64 = 1, kSwap16 = 2, kSwap32 = 3, kTile128Gather = 4, kTile64Gather = 5, kTile128Wide = 6
};

// GEMM1: out = e4m3(silu(A W[n/2:]^T) * (A W[:n/2]^T) / scale), out_scale = per-128-column amax / 448; n % 256 == 0.
cudaError_t gemm1_swiglu_fp8(const GroupedGemm& p, cudaStream_t stream, Tile tile = Tile::kTile128);
// GEMM2: out = bf16((A W^T) * row_weight[row]); n % 128 == 0.
cudaError_t gemm2_rowweight_bf16(const GroupedGemm& p, cudaStream_t stream, Tile tile = Tile::kTile128);
// Plain f32 result (checks the main loop alone); n % 128 == 0.
cudaError_t gemm_f32(const GroupedGemm& p, cudaStream_t stream, Tile tile = Tile::kTile128);

// xp[r] = x[perm_tok[r]], xps[kb][r] = x_scale[kb][perm_tok[r]] for r < offsets[groups-1] + counts[groups-1].
cudaError_t gather_rows(const void* x, const float* x_scale, int T, int k, const int* perm_tok, const int* counts,
                        const int* offsets, int groups, void* xp, float* xps, int xps_ld, cudaStream_t stream);

// The whole MoE on the wgmma path with one tile configuration for both GEMMs (swap-AB tiles may split K):
// route -> permute -> gather -> GEMM1 (SwiGLU, e4m3; split-K units finished by their last split) -> GEMM2
// (bf16 x weight, or f32 split partials) -> combine;
// no host synchronisation. a.workspace holds test_workspace(a.T).bytes.
MoeWorkspace test_workspace(int64_t T);
cudaError_t moe_forward(const LaunchArgs& a, cudaStream_t stream, Tile tile = Tile::kTile128);

// The tile configurations, for reports.
const char* config_summary();

}  // namespace wg
}  // namespace fused_moe

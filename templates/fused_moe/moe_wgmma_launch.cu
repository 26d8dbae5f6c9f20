// The GPU test's instantiation unit of the tensor-core MoE path (moe_wgmma_launch.cuh): every tile configuration,
// chosen at run time, so one build checks them all. The solution instantiates only what its plan uses
// (moe_launch.cu, rendered from moe_launch.cu.j2).
#include <cstdio>

#include "moe_wgmma_launch.cuh"

namespace fused_moe {
namespace wg {
namespace {

constexpr int kStages128 = 6, kStages64 = 8;                 // 197 / 195 KB of shared memory
constexpr int kStagesWide = 4;                               // 199 KB: a stage is 16 KB of A + 32 KB of B
constexpr int kSwapStagesSwiGlu = 6, kSwapStagesPlain = 10;  // SwiGLU stages hold two weight boxes
constexpr int kSwapStagesHiLo = 8;                           // GEMM2 on a hi + lo intermediate: two token boxes
constexpr int kTestPartialRows = 1024;                       // split-K budget of the end-to-end path

// The gather tiles gather only in GEMM1 (SwiGLU); their GEMM2 is the plain row tile of the same height.
template <Epi kEpi>
GemmPrepare instance(Tile tile) {
  constexpr int kSwap = kEpi == Epi::kSwiGluFp8 ? kSwapStagesSwiGlu : kSwapStagesPlain;
  constexpr bool kGather = kEpi == Epi::kSwiGluFp8;
  switch (tile) {
    case Tile::kTile128: return prepare_rows<2, kStages128, kEpi>;
    case Tile::kTile64: return prepare_rows<1, kStages64, kEpi>;
    case Tile::kSwap16: return prepare_swap<16, kSwap, kEpi>;
    case Tile::kSwap32: return prepare_swap<32, kSwap, kEpi>;
    case Tile::kTile128Gather: return prepare_rows<2, kStages128, kEpi, kGather>;
    case Tile::kTile64Gather: return prepare_rows<1, kStages64, kEpi, kGather>;
    case Tile::kTile128Wide: return prepare_rows<2, kStagesWide, kEpi, false, 256>;
  }
  return nullptr;
}

bool is_gather(Tile tile) { return tile == Tile::kTile128Gather || tile == Tile::kTile64Gather; }

bool is_swap(Tile tile) { return tile == Tile::kSwap16 || tile == Tile::kSwap32; }

// GEMM2 of the end-to-end path: on the swap-AB tiles it reads the hi + lo intermediate GEMM1 wrote.
GemmPrepare gemm2_of_plan(Tile tile) {
  if (tile == Tile::kSwap16) return prepare_swap<16, kSwapStagesHiLo, Epi::kBf16RowWeight, 2>;
  if (tile == Tile::kSwap32) return prepare_swap<32, kSwapStagesHiLo, Epi::kBf16RowWeight, 2>;
  return instance<Epi::kBf16RowWeight>(tile);
}

}  // namespace

cudaError_t gemm1_swiglu_fp8(const GroupedGemm& p, cudaStream_t stream, Tile tile) {
  return launch_gemm(instance<Epi::kSwiGluFp8>(tile), p, stream);
}
cudaError_t gemm2_rowweight_bf16(const GroupedGemm& p, cudaStream_t stream, Tile tile) {
  return launch_gemm(instance<Epi::kBf16RowWeight>(tile), p, stream);
}
cudaError_t gemm_f32(const GroupedGemm& p, cudaStream_t stream, Tile tile) {
  return launch_gemm(instance<Epi::kF32>(tile), p, stream);
}

cudaError_t gather_rows(const void* x, const float* x_scale, int T, int k, const int* perm_tok, const int* counts,
                        const int* offsets, int groups, void* xp, float* xps, int xps_ld, cudaStream_t stream) {
  return gather_rows_pdl(x, x_scale, T, k, perm_tok, counts, offsets, groups, xp, xps, xps_ld, stream);
}

MoeWorkspace test_workspace(int64_t T) { return MoeWorkspace(T, kTestPartialRows, true); }

cudaError_t moe_forward(const LaunchArgs& a, cudaStream_t stream, Tile tile) {
  const MoePlan plan{instance<Epi::kSwiGluFp8>(tile), gemm2_of_plan(tile), is_swap(tile) ? kTestPartialRows : 0,
                     is_swap(tile), is_swap(tile), is_gather(tile)};
  const char* failed = nullptr;
  const cudaError_t err = moe_forward(a, plan, stream, &failed);
  if (err != cudaSuccess) std::fprintf(stderr, "moe_forward: %s failed: %s\n", failed, cudaGetErrorString(err));
  return err;
}

const char* config_summary() {
  static char text[400];
  std::snprintf(text, sizeof(text),
                "tile 0: BM=128 BN=128 stages=%d smem=%d B; tile 1: BM=64 BN=128 stages=%d smem=%d B; "
                "tile 2/3: swap-AB 16/32 tokens x 128 weight rows, stages %d (SwiGLU, smem %d/%d B) / %d (plain), "
                "split-K up to %d with %d partial rows, hi + lo intermediate (GEMM2 stages %d); tile 4/5: tile 0/1 "
                "with GEMM1 gathering its rows (end to end only); tile 6: tile 0 256 columns wide, stages %d smem %d B",
                kStages128, WgConfig<2, 128, kStages128, Epi::kSwiGluFp8>::kSmem, kStages64,
                WgConfig<1, 128, kStages64, Epi::kSwiGluFp8>::kSmem, kSwapStagesSwiGlu,
                SwapConfig<16, kSwapStagesSwiGlu, Epi::kSwiGluFp8>::kSmem,
                SwapConfig<32, kSwapStagesSwiGlu, Epi::kSwiGluFp8>::kSmem, kSwapStagesPlain, kMaxSplits,
                kTestPartialRows, kSwapStagesHiLo, kStagesWide, WgConfig<2, 256, kStagesWide, Epi::kSwiGluFp8>::kSmem);
  return text;
}

}  // namespace wg
}  // namespace fused_moe

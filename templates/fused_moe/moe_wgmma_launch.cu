// Instantiates the wgmma/TMA grouped GEMMs of moe_wgmma.cuh and launches them (CUDA runtime only). Tile
// parameters are the constants below; a rendered solution would take them from template.toml.
#include <algorithm>
#include <cstdio>

#include "moe_common.cuh"
#include "moe_routing.cuh"
#include "moe_gemm_large.cuh"  // combine_kernel
#include "moe_wgmma.cuh"
#include "moe_wgmma_swap.cuh"
#include "moe_wgmma_api.h"

namespace fused_moe {
namespace wg {
namespace {

// Tile configurations (both one CTA per SM, BN = 128):
//  kTile128: two consumer warpgroups, BM = 128, 6 stages of 32.5 KB (197 KB of shared memory);
//  kTile64:  one consumer warpgroup,  BM = 64,  8 stages of 24.25 KB (195 KB): less waste when experts get few rows.
//  kSwap16 / kSwap32: swap-AB (moe_wgmma_swap.cuh), 16 / 32 tokens per tile, 128 weight rows per unit; 6 stages
//  (SwiGLU: 2 x 16 KB of weights each) or 10 (one 16 KB weight box each).
constexpr int kBN = 128;
constexpr int kStages128 = 6, kStages64 = 8;
constexpr int kSwapStagesSwiGlu = 6, kSwapStagesPlain = 10;

int num_sms() {
  static const int n = [] {
    int dev = 0, count = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    return count;
  }();
  return n;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int kConsumers, int kBN, int kStages, Epi kEpi>
cudaError_t launch(const GroupedGemm& p, cudaStream_t stream) {
  using C = WgConfig<kConsumers, kBN, kStages, kEpi>;
  if (p.groups < 1 || p.groups > kMaxGroups || p.k % 128 != 0 || p.n % (C::kSwiGlu ? 256 : kBN) != 0 ||
      p.sfa_ld % 4 != 0 || p.sfa_ld < p.a_rows || p.a_rows < 1 || !aligned16(p.a) || !aligned16(p.b) ||
      !aligned16(p.sfa))
    return cudaErrorInvalidValue;
  CUtensorMap tm_a, tm_sfa, tm_b;
  const int k_blocks = p.k / 128;
  bool ok = sm90::encode_tma_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, p.k, p.a_rows, p.k, 128, C::kBM,
                                CU_TENSOR_MAP_SWIZZLE_128B);
  ok = ok && sm90::encode_tma_2d(&tm_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfa, p.a_rows, k_blocks,
                                 static_cast<uint64_t>(p.sfa_ld) * 4, C::kBM, 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  ok = ok && sm90::encode_tma_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, p.k,
                                 static_cast<uint64_t>(p.groups) * p.n, p.k, 128, C::kBoxB,
                                 CU_TENSOR_MAP_SWIZZLE_128B);
  if (!ok) return cudaErrorInvalidValue;
  auto kernel = grouped_gemm_kernel<kConsumers, kBN, kStages, kEpi>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem);
  if (attr != cudaSuccess) return attr;
  const GemmArgs args{p.counts, p.offsets, p.groups, p.n, k_blocks, p.sfb, p.out, p.ldo, p.out_scale, p.out_scale_ld,
                      p.row_weight};
  kernel<<<num_sms(), C::kThreads, C::kSmem, stream>>>(tm_a, tm_sfa, tm_b, args);
  return cudaGetLastError();
}

}  // namespace

template <int kNT, int kStages, Epi kEpi>
cudaError_t launch_swap(const GroupedGemm& p, cudaStream_t stream) {
  using C = SwapConfig<kNT, kStages, kEpi>;
  if (p.groups < 1 || p.groups > kMaxGroups || p.k % 128 != 0 || p.n % (C::kSwiGlu ? 256 : 128) != 0 ||
      p.sfa_ld % 4 != 0 || p.sfa_ld < p.a_rows || p.a_rows < 1 || !aligned16(p.a) || !aligned16(p.b) ||
      !aligned16(p.sfa))
    return cudaErrorInvalidValue;
  CUtensorMap tm_t, tm_sfa, tm_w;
  const int k_blocks = p.k / 128;
  bool ok = sm90::encode_tma_2d(&tm_t, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, p.k, p.a_rows, p.k, 128, kNT,
                                CU_TENSOR_MAP_SWIZZLE_128B);
  ok = ok && sm90::encode_tma_2d(&tm_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfa, p.a_rows, k_blocks,
                                 static_cast<uint64_t>(p.sfa_ld) * 4, kNT, 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  ok = ok && sm90::encode_tma_2d(&tm_w, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, p.k,
                                 static_cast<uint64_t>(p.groups) * p.n, p.k, 128, C::kWRows,
                                 CU_TENSOR_MAP_SWIZZLE_128B);
  if (!ok) return cudaErrorInvalidValue;
  auto kernel = grouped_gemm_swap_kernel<kNT, kStages, kEpi>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem);
  if (attr != cudaSuccess) return attr;
  const GemmArgs args{p.counts, p.offsets, p.groups, p.n, k_blocks, p.sfb, p.out, p.ldo, p.out_scale, p.out_scale_ld,
                      p.row_weight};
  kernel<<<num_sms(), C::kThreads, C::kSmem, stream>>>(tm_t, tm_sfa, tm_w, args);
  return cudaGetLastError();
}

template <Epi kEpi>
cudaError_t launch_tile(const GroupedGemm& p, Tile tile, cudaStream_t stream) {
  constexpr int kSwapStages = kEpi == Epi::kSwiGluFp8 ? kSwapStagesSwiGlu : kSwapStagesPlain;
  switch (tile) {
    case Tile::kTile128: return launch<2, kBN, kStages128, kEpi>(p, stream);
    case Tile::kTile64: return launch<1, kBN, kStages64, kEpi>(p, stream);
    case Tile::kSwap16: return launch_swap<16, kSwapStages, kEpi>(p, stream);
    case Tile::kSwap32: return launch_swap<32, kSwapStages, kEpi>(p, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t gemm1_swiglu_fp8(const GroupedGemm& p, cudaStream_t stream, Tile tile) {
  return launch_tile<Epi::kSwiGluFp8>(p, tile, stream);
}

cudaError_t gemm2_rowweight_bf16(const GroupedGemm& p, cudaStream_t stream, Tile tile) {
  return launch_tile<Epi::kBf16RowWeight>(p, tile, stream);
}

cudaError_t gemm_f32(const GroupedGemm& p, cudaStream_t stream, Tile tile) {
  return launch_tile<Epi::kF32>(p, tile, stream);
}

cudaError_t gather_rows(const void* x, const float* x_scale, int T, int k, const int* perm_tok, const int* counts,
                        const int* offsets, int groups, void* xp, float* xps, int xps_ld, cudaStream_t stream) {
  if (groups < 1 || k % 128 != 0 || !aligned16(x) || !aligned16(xp)) return cudaErrorInvalidValue;
  gather_rows_kernel<<<4 * num_sms(), 256, 0, stream>>>(static_cast<const uint8_t*>(x), x_scale, T, perm_tok, counts,
                                                        offsets, groups, k / 128, static_cast<uint8_t*>(xp), xps,
                                                        xps_ld);
  return cudaGetLastError();
}

cudaError_t moe_forward(const LaunchArgs& a, cudaStream_t stream, Tile tile) {
  if (a.T < 1) return cudaSuccess;
  const MoeWorkspace ws(a.T);
  unsigned char* base = a.workspace;
  auto* meta = reinterpret_cast<MoeMeta*>(base + ws.meta);
  auto* mask = reinterpret_cast<uint32_t*>(base + ws.mask);
  auto* local_w = reinterpret_cast<float*>(base + ws.local_w);
  auto* perm_tok = reinterpret_cast<int*>(base + ws.perm_tok);
  auto* perm_w = reinterpret_cast<float*>(base + ws.perm_w);
  auto* slot_of = reinterpret_cast<int*>(base + ws.slot_of);
  auto* xp = base + ws.xp;
  auto* xps = reinterpret_cast<float*>(base + ws.xps);
  auto* inter = base + ws.inter;
  auto* inter_s = reinterpret_cast<float*>(base + ws.inter_s);
  auto* ypart = reinterpret_cast<__nv_bfloat16*>(base + ws.ypart);
  const int cap = static_cast<int>(ws.capacity);

  constexpr int kRouteWarps = 8, kPermuteChunk = 8192;
  const RouteArgs route{a.logits, static_cast<const __nv_bfloat16*>(a.bias), a.T, a.local_offset, a.scaling};
  route_kernel<kRouteWarps><<<(a.T + kRouteWarps - 1) / kRouteWarps, kRouteWarps * 32, 0, stream>>>(route, mask,
                                                                                                     local_w);
  permute_kernel<kPermuteChunk><<<1, 1024, 0, stream>>>(mask, local_w, a.T, PermOut{meta, perm_tok, perm_w, slot_of});
  cudaError_t err = gather_rows(a.x, a.x_scale, a.T, kHidden, perm_tok, meta->counts, meta->offsets, kLocalExperts,
                                xp, xps, ws.ld, stream);
  if (err != cudaSuccess) return err;
  const GroupedGemm g1{xp,    cap,        xps,        ws.ld,  a.w1,  a.w1_scale, kLocalExperts, kGemm1Out, kHidden,
                       meta->counts, meta->offsets, inter, kInter, inter_s, ws.ld, nullptr};
  if ((err = gemm1_swiglu_fp8(g1, stream, tile)) != cudaSuccess) return err;
  const GroupedGemm g2{inter, cap,        inter_s,    ws.ld,  a.w2,  a.w2_scale, kLocalExperts, kHidden,   kInter,
                       meta->counts, meta->offsets, ypart, kHidden, nullptr, 0, perm_w};
  if ((err = gemm2_rowweight_bf16(g2, stream, tile)) != cudaSuccess) return err;
  const LargeArgs comb{static_cast<const uint8_t*>(a.x), a.x_scale, nullptr, nullptr, nullptr, nullptr, meta,
                       perm_tok, perm_w, slot_of, mask, nullptr, ypart, static_cast<__nv_bfloat16*>(a.out), a.T};
  combine_kernel<<<std::min(a.T, 16 * num_sms()), 128, 0, stream>>>(comb);
  return cudaGetLastError();
}

const char* config_summary() {
  static char text[400];
  std::snprintf(text, sizeof(text),
                "tile 0: BM=128 BN=%d stages=%d smem=%d B; tile 1: BM=64 BN=%d stages=%d smem=%d B; "
                "tile 2/3: swap-AB 16/32 tokens x 128 weight rows, stages %d (SwiGLU, smem %d/%d B) / %d (plain)",
                kBN, kStages128, WgConfig<2, kBN, kStages128, Epi::kSwiGluFp8>::kSmem, kBN, kStages64,
                WgConfig<1, kBN, kStages64, Epi::kSwiGluFp8>::kSmem, kSwapStagesSwiGlu,
                SwapConfig<16, kSwapStagesSwiGlu, Epi::kSwiGluFp8>::kSmem,
                SwapConfig<32, kSwapStagesSwiGlu, Epi::kSwiGluFp8>::kSmem, kSwapStagesPlain);
  return text;
}

}  // namespace wg
}  // namespace fused_moe

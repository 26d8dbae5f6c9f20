// One-pass fused MoE for few tokens (T <= kOnePassTMax): routing, permutation, gather, GEMM1 (SwiGLU, e4m3 hi + lo
// intermediate), GEMM2 and the combine in ONE cooperative launch of one CTA per SM, so the weights stream without
// a kernel boundary: at T = 1 the five-kernel chain spends ~30 of its ~50 us between and around the GEMMs (the
// weights of the two active experts stream in ~21 us).
//
//  * Phase 0, every CTA: routes all T tokens itself (route_token_warp: the reference's selection) and builds the
//    counts, offsets, slots and both unit tables in shared memory (every CTA gets the same ones); CTA 0 zeroes the
//    arrival counters on entry, published by a split grid barrier (SplitGridBarrier: every CTA arrives after the
//    routing, and only the two threads that touch the counters wait, before their first use, while the weights
//    stream: a full grid sync after the routing held every CTA ~9.5 us on the H200, as long as one expert's
//    weights take to stream). GEMM1 reads its token rows straight from hidden_states (one TMA row per routed token,
//    no gathered copy) and their scales from a shared-memory copy of hidden_states_scale that the producer writes
//    into each stage: nothing GEMM1 reads depends on another CTA, so it starts right after the routing.
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
// No host synchronisation; the launch set depends on T only. Every call zeroes its counters before they are used.
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
// The cooperative launch's grid barrier word (cooperative_groups' own: the driver's grid workspace, whose bit 31
// flips once every CTA has added its share: block 0 adds 2^31 - (grid - 1), the others 1), used split: arrive() by
// one thread per CTA after a __syncthreads (release: covers the CTA's earlier stores), wait() by any thread that read
// bit 31 with observe() before its CTA arrived (acquire). The barrier cannot complete before every CTA arrives, so
// an observation made before the own CTA's arrival is the barrier's starting phase.
struct SplitGridBarrier {
  unsigned* word;
  __device__ static SplitGridBarrier of_this_grid() {
    return {&cooperative_groups::details::get_grid_workspace()->barrier};
  }
  __device__ unsigned observe() const {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(word) : "memory");
    return v & 0x80000000u;
  }
  __device__ void arrive() const {
    const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(word), "r"(add) : "memory");
  }
  __device__ void wait(unsigned start) const {  // with -DSM90_WAIT_LIMIT=<polls> a wait that never ends traps
    for (long long polls = 0;; ++polls) {
      unsigned v;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(word) : "memory");
      if ((v & 0x80000000u) != start) return;
#ifdef SM90_WAIT_LIMIT
      if (polls == (SM90_WAIT_LIMIT)) __trap();
#endif
      __nanosleep(64);
    }
  }
};

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
  static constexpr int kOffXsBar = kOffBar + 2 * kStages * 8;  // full[], empty[], then the scale copy's barrier
  static constexpr int kOffXch = (kOffXsBar + 8 + 15) / 16 * 16;  // SwiGLU amax exchange (2 x 8 x 16 f32)
  static constexpr int kOffRoute = kOffXch + 2 * 8 * kOnePassTokens * 4;
  static constexpr int kOffXs = (kOffRoute + static_cast<int>(sizeof(OnePassRoute)) + 15) / 16 * 16;
  static constexpr int kSmem = kOffXs + kHiddenBlocks * kOnePassTMax * 4 + 1024;  // + hidden_states_scale [56][T]
  static constexpr int kThreads = 384;
  // The producer thread also hands GEMM1 stages their token rows and scales (more than the 40 registers the swap
  // kernel gives its producer): 56 for it, 224 for the consumers (2 x 128 x 224 + 128 x 56 = 64512 <= 65536).
  static constexpr int kProducerRegs = 56, kConsumerRegs = 224;
  static_assert(256 * kConsumerRegs + 128 * kProducerRegs <= 384 * 168,
                "setmaxnreg moves registers within what a 384-thread CTA holds (168 each): no more");
  static_assert(G1::kSfaPitch == G2::kSfaPitch && G1::kTBytes <= kTStride && G2::kWBytes <= kWStride, "one ring");
  static_assert(kSmem <= 227 * 1024, "shared memory budget (227 KB per CTA)");
};

struct OnePassArgs {
  RouteArgs route;
  const float* x_scale;   // [56][T]
  int* unit_done;         // [32 x 16] GEMM1 split arrivals per unit
  int* expert_done;       // [32] finished GEMM1 units per local expert
  int* column_done;       // [56] finished GEMM2 items per column unit
  __nv_bfloat16* ypart;   // [capacity][7168] (S2 == 1)
  __nv_bfloat16* out;     // [T][7168]
};

// Phase 0's routing and permutation, by the whole CTA (T <= 16 tokens, 12 warps), every step a single warp's
// latency chain (~7 us at T = 1 when done serially). Returns the routed rows, the same in every CTA; 0 (no local
// expert) returns right after the routing, with nothing else of R written. Token t goes to warp t + 1 (the last to
// warp 0), so at small T the routing starts on warps with nothing else to do on entry (warp 0 holds thread 0,
// which observes the grid barrier).
__device__ __forceinline__ int onepass_route(const OnePassArgs& a, const GemmArgs& g1, const GemmArgs& g2,
                                             OnePassRoute* R) {
  static_assert(kOnePassTMax <= kOnePassTokens, "an expert's rows are one swap-AB tile: its unit count is 0 or 1");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  uint32_t any = 0;
  for (int t = warp == 0 ? warps - 1 : warp - 1; t < a.route.T; t += warps) {
    const uint32_t m = route_token_warp(a.route, t, R->w + t * kLocalExperts);
    if (lane == 0) R->mask[t] = m;
    any |= m;
  }
  if (!__syncthreads_or(any != 0u)) return 0;  // also publishes the barriers' init (as the __syncthreads below)
  if (warp == 0) {  // lane = local expert: count, offsets, slots in token order (expert-major, as permute_kernel)
    uint32_t masks[kOnePassTMax];
#pragma unroll
    for (int t = 0; t < kOnePassTMax; ++t) masks[t] = t < a.route.T ? R->mask[t] : 0u;
    int cnt = 0;
#pragma unroll
    for (int t = 0; t < kOnePassTMax; ++t) cnt += (masks[t] >> lane) & 1u;
    const int incl = warp_inclusive_sum(cnt), excl = incl - cnt;
    R->counts[lane] = cnt;
    R->offsets[lane] = excl;
    int pos = excl;
#pragma unroll
    for (int t = 0; t < kOnePassTMax; ++t) {
      if ((masks[t] >> lane) & 1u) {
        R->perm_tok[pos] = t;
        R->perm_w[pos] = R->w[t * kLocalExperts + lane];
        R->slot_of[t * kMaxLocalPerToken + __popc(masks[t] & ((1u << lane) - 1u))] = pos;
        ++pos;
      }
    }
    // Both unit tables and both split factors from registers: lanes 0-7 weigh GEMM1's S, lanes 8-15 GEMM2's.
    const int rows = __shfl_sync(0xffffffffu, incl, 31);
    const int experts = __popc(__ballot_sync(0xffffffffu, cnt > 0));  // one 16-token tile each
    write_unit_table(cnt, excl, kOnePassTokens, kGemm1Units, R->table1);
    write_unit_table(cnt, excl, kOnePassTokens, kGemm2Units, R->table2);
    const bool second = (lane & 8) != 0;
    const GemmArgs& g = second ? g2 : g1;
    const int s = choose_splits(experts * (second ? kGemm2Units : kGemm1Units), rows, gridDim.x, g.k_blocks,
                                g.partial_rows);
    const int s1 = __shfl_sync(0xffffffffu, s, 0), s2 = __shfl_sync(0xffffffffu, s, 8);
    if (lane == 0) {
      R->g1 = g1;
      R->g2 = g2;
      R->g1.counts = R->g2.counts = R->counts;
      R->g1.offsets = R->g2.offsets = R->offsets;
      R->g2.row_weight = R->perm_w;
      R->rows = rows;
      R->splits1 = s1;
      R->splits2 = s2;
      R->items1 = experts * kGemm1Units * s1;
      R->items2 = experts * kGemm2Units * s2;
    }
  }
  __syncthreads();
  return R->rows;
}

// Producer: the loads of one item's K blocks into the ring. A GEMM1 item's rows (inputs) are always ready; a GEMM2
// item's once its expert's counter shows every GEMM1 unit. Until then only the weights are issued, at most
// kStages stages ahead (the next slot would be one of this item's own stages, which wait for their rows). Those
// stages are consecutive (from the item's first): `pending` of them from (pending_stage, pending_kb) on, and their
// row loads go out as soon as the rows are ready.
template <class L>
struct OnePassProducer {
  const CUtensorMap *tm_x, *tm_w1, *tm_t2, *tm_sfa2, *tm_w2;
  uint32_t base;
  uint8_t* smem;
  const OnePassRoute* R;
  int T;
  uint32_t stage = 0, phase = 0;
  uint32_t pending_stage = 0;
  int pending_kb = 0, pending = 0;

  __device__ uint32_t full(uint32_t s) const { return base + L::kOffBar + 8 * s; }
  __device__ uint32_t empty(uint32_t s) const { return base + L::kOffBar + 8 * (L::kStages + s); }

  // GEMM1 stage s, K block kb: the scale_a slots the consumer reads (at row0 % 4 + token, as a TMA box would put
  // them), written before the stage's arrive releases them. Slots of padding tokens keep stale values: their
  // accumulator columns are never stored (zeroing all 16 slots costs the producer's critical path at T = 1).
  __device__ void gemm1_scales(const Unit& t, uint32_t s, int kb) const {
    const float* xs = reinterpret_cast<const float*>(smem + L::kOffXs) + kb * T;
    float* sfa = reinterpret_cast<float*>(smem + L::kOffSfa + s * L::kSfaPitch) + (t.row0 & 3);
    for (int i = 0; i < t.rows; ++i) sfa[i] = xs[R->perm_tok[t.row0 + i]];
  }
  // One 128-byte TMA row per routed token, from hidden_states itself, at row i of the stage's 128 B-swizzled tile
  // (the swizzle follows the shared-memory address: a 1-row box lands where row i of a 16-row box would).
  __device__ void gemm1_rows(const Unit& t, uint32_t s, int kb) const {
    const uint32_t dst = base + L::kOffT + s * L::kTStride;
    for (int i = 0; i < t.rows; ++i)
      sm90::tma_load_2d(dst + i * 128, tm_x, full(s), kb * 128, R->perm_tok[t.row0 + i]);
  }
  __device__ void gemm2_rows(const Unit& t, const GemmArgs& g, uint32_t s, int kb) const {
    const uint32_t dst = base + L::kOffT + s * L::kTStride;
    sm90::tma_load_2d(dst, tm_t2, full(s), kb * 128, t.row0);
    sm90::tma_load_2d(dst + kOnePassTokens * 128, tm_t2, full(s), kb * 128, t.row0 + g.lo_rows);
    sm90::tma_load_2d(base + L::kOffSfa + s * L::kSfaPitch, tm_sfa2, full(s), t.row0 & ~3, kb);
  }

  __device__ void flush_pending(const Unit& t, const GemmArgs& g) {  // GEMM2 rows, once the expert's are written
    fence_proxy_async_global();  // rows written by other CTAs' generic stores, read by this thread's TMA
    for (int i = 0; i < pending; ++i) gemm2_rows(t, g, (pending_stage + i) % L::kStages, pending_kb + i);
    pending = 0;
  }

  // Issues the `count` K blocks of item (t, split) from kb_begin on; `ready` says whether its rows may be loaded
  // (GEMM1: always), `wait_ready` blocks until they may (GEMM2: the expert's counter).
  template <class Ready>
  __device__ void issue(bool gemm2, const Unit& t, const GemmArgs& g, int kb_begin, int count, bool& ready,
                        Ready wait_ready) {
    using G1 = typename L::G1;
    using G2 = typename L::G2;
    const uint32_t tx = gemm2 ? G2::kTxBytes : G1::kWBytes + t.rows * 128;
    const int w_row = t.group * g.n + t.nu * 128;
    for (int k = 0; k < count; ++k) {
      if (!ready && k >= L::kStages) {
        wait_ready();
        ready = true;
        flush_pending(t, g);
      }
      const int kb = kb_begin + k;
      sm90::mbar_wait(empty(stage), phase ^ 1);
      if (!gemm2) gemm1_scales(t, stage, kb);  // before the arrive, which releases them to the consumers
      sm90::mbar_arrive_expect_tx(full(stage), tx);
      const uint32_t w_dst = base + L::kOffW + stage * L::kWStride;
      sm90::tma_load_2d(w_dst, gemm2 ? tm_w2 : tm_w1, full(stage), kb * 128, w_row);
      if (!gemm2) sm90::tma_load_2d(w_dst + 128 * 128, tm_w1, full(stage), kb * 128, w_row + g.n / 2);
      if (!gemm2) {
        gemm1_rows(t, stage, kb);
      } else if (ready) {
        gemm2_rows(t, g, stage, kb);
      } else {
        if (pending == 0) pending_stage = stage, pending_kb = kb;
        ++pending;
      }
      if (++stage == L::kStages) stage = 0, phase ^= 1;
    }
  }
};

template <int kStages>
__global__ void __launch_bounds__(384, 1)
    moe_onepass_kernel(const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_w1,
                       const __grid_constant__ CUtensorMap tm_t2,
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
    sm90::tma_prefetch_desc(&tm_x);
    sm90::tma_prefetch_desc(&tm_w1);
    sm90::tma_prefetch_desc(&tm_t2);
    sm90::tma_prefetch_desc(&tm_sfa2);
    sm90::tma_prefetch_desc(&tm_w2);
#pragma unroll 1
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(base + L::kOffBar + 8 * s, 1);
      sm90::mbar_init(base + L::kOffBar + 8 * (kStages + s), 8);  // lane 0 of every consumer warp
    }
    sm90::mbar_init(base + L::kOffXsBar, 1);
    sm90::mbar_fence_init();
    // hidden_states_scale [56][T] (224 T bytes, contiguous) into shared memory while the CTA routes: the producer
    // hands each GEMM1 stage its tokens' scales from there.
    sm90::mbar_arrive_expect_tx(base + L::kOffXsBar, kHiddenBlocks * a.route.T * 4);
    sm90::bulk_load(base + L::kOffXs, a.x_scale, kHiddenBlocks * a.route.T * 4, base + L::kOffXsBar);
  }
  const SplitGridBarrier bar = SplitGridBarrier::of_this_grid();
  // The two threads that touch the counters (consumer thread 0, the producer) see the barrier's starting phase.
  const unsigned bar_start = tid == 0 || tid == kProducer ? bar.observe() : 0u;
  if (blockIdx.x == 0) {  // zero the counters first: the split grid barrier publishes them
    for (int i = tid; i < kLocalExperts * kGemm1Units; i += blockDim.x) a.unit_done[i] = 0;
    for (int i = tid; i < kLocalExperts; i += blockDim.x) a.expert_done[i] = 0;
    for (int i = tid; i < kGemm2Units; i += blockDim.x) a.column_done[i] = 0;
  }
  const int rows = onepass_route(a, g1, g2, R);  // ends with a CTA barrier (also for the barriers' init)
  if (rows == 0) {  // no local expert: every output is 0 (uniform over the grid: no CTA arrives or waits)
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    const int chunks = a.route.T * kHidden / 8;
    for (int c = blockIdx.x * blockDim.x + tid; c < chunks; c += G * blockDim.x)
      reinterpret_cast<uint4*>(a.out)[c] = zero;
    if (tid == kProducer) sm90::mbar_wait(base + L::kOffXsBar, 0);  // no copy may still land in a finished CTA
    return;
  }

  // onepass_route's closing __syncthreads ordered CTA 0's zeroing before this. Every CTA arrives exactly once, or
  // (no local expert, above) none does: the word is cooperative_groups' own, a partial round would skew it for
  // every later cooperative launch in the context.
  if (tid == 0) bar.arrive();
  const int items1 = R->items1, items2 = R->items2, s1 = R->splits1, s2 = R->splits2;
  const GemmArgs& G1a = R->g1;
  const GemmArgs& G2a = R->g2;

  if (tid >= 256) {
    // ---------------------------------------------------------------- producer
    sm90::setmaxnreg_dec<L::kProducerRegs>();
    if (tid != kProducer) return;
    OnePassProducer<L> prod{&tm_x, &tm_w1, &tm_t2, &tm_sfa2, &tm_w2, base, smem, R, a.route.T};
    bool scales_by_tma = false, zeroed = false;
    sm90::mbar_wait(base + L::kOffXsBar, 0);  // the scale copy (landed during the routing)
#pragma unroll 1
    for (int i = blockIdx.x; i < items1 + items2; i += G) {
      const bool gemm2 = i >= items1;
      if (gemm2 && !scales_by_tma) {  // TMA (async proxy) now writes the scale slots this thread wrote
        sm90::fence_proxy_async();
        scales_by_tma = true;
      }
      if (gemm2 && !zeroed) {  // the expert counters it polls are zeroed
        bar.wait(bar_start);
        zeroed = true;
      }
      const int item = gemm2 ? i - items1 : i, splits = gemm2 ? s2 : s1;
      const GemmArgs& g = gemm2 ? G2a : G1a;
      const Unit t = unit_at(gemm2 ? R->table2 : R->table1, item / splits, kOnePassTokens);
      const int split = item % splits;
      const int kb0 = split * g.k_blocks / splits, kb1 = (split + 1) * g.k_blocks / splits;
      bool ready = !gemm2;
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
      prod.issue(gemm2, t, g, kb0, kb1 - kb0, ready, wait_rows);
      if (!ready) {
        wait_rows();
        prod.flush_pending(t, g);
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  sm90::setmaxnreg_inc<L::kConsumerRegs>();
  uint32_t stage = 0, phase = 0;
  int parity = 0;
  bool zeroed = false;
  auto wait_zeroed = [&] {  // thread 0, before it first adds to a counter
    if (!zeroed) bar.wait(bar_start);
    zeroed = true;
  };
#pragma unroll 1
  for (int i = blockIdx.x; i < items1 + items2; i += G) {
    if (i < items1) {
      const Unit t = unit_at(R->table1, i / s1, kOnePassTokens);
      const bool done = swap_consume_unit<kOnePassTokens, Epi::kSwiGluFp8, 1, L>(
          G1a, t, i / s1, i % s1, s1, rows, smem, base, R->table1 + 99, stage, phase, parity, wait_zeroed);
      if (done) {  // the unit's intermediate is written: publish it to the GEMM2 items of its expert
        __threadfence();
        fence_proxy_async_global();
        sm90::named_barrier_sync(1, 256);
        if (tid == 0) {  // release: every consumer's stores (fenced, then the barrier) before the count
          wait_zeroed();
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
        wait_zeroed();
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

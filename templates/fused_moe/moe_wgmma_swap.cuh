// Swap-AB variant of the grouped GEMMs of moe_wgmma.cuh for few rows per expert (small T): the WEIGHTS are
// wgmma's M operand (64 rows per consumer warpgroup) and the expert's tokens its N operand (kNT = 16, 32 or 64), so a
// tile is not padded to 64 / 128 token rows and each K block costs a few small wgmmas instead of a 64 x 128 one.
// Same problem, arguments, scale layouts, unit order and pipeline (one producer thread issuing TMA into a ring
// of stages with full/empty mbarriers, two consumer warpgroups) as grouped_gemm_kernel; what changes:
//  * A stage holds 128 weight rows (two boxes of 128 rows for SwiGLU: x1 rows j0.., x2 rows n/2 + j0..), the
//    kNT token rows and their kNT scale_a values. Consumer warpgroup w multiplies weight rows 64w..64w+63.
//  * SwiGLU (GEMM1): each warpgroup keeps two accumulators, x1 and x2 (64 weight rows x kNT tokens each), so the
//    gate and the up value of an intermediate column sit in the same thread; a unit covers 128 intermediate
//    columns (2 warpgroups x 64) in ONE pass. The per-(token, 128 columns) amax is reduced over the 8 row lanes
//    of a warp (shuffles) and the 8 consumer warps (shared memory, double-buffered by unit parity).
//  * Accumulator layout transposed: thread (warp, lane) holds weight rows 16 warp + lane/4 (+8) and tokens
//    8i + 2(lane%4) + {0, 1}; promotion uses one weight scale per warpgroup and one scale_a per token column.
//  * Split-K for few units (small T: one active expert's GEMM1 is only 16 units for 132 SMs): each unit's K blocks
//    are cut into S contiguous ranges (choose_splits, from the routed counts, on the device), unit u runs
//    (u / S, split u % S), and every split writes f32 partial sums to args.partial (GEMM1: the last split of a
//    unit to arrive, counted in args.unit_done, adds them in split order and runs the SwiGLU epilogue,
//    swiglu_finish_unit; GEMM2: the combine adds them). S = 1 keeps the fused epilogues.
//  * hi + lo intermediate (args.lo_rows > 0): GEMM1 writes e4m3(16 x rounding residual) below the e4m3 output;
//    GEMM2 with kTBoxes = 2 loads both token boxes and promotes (hi + lo / 16) x scale.
#pragma once

#include "moe_wgmma.cuh"

namespace fused_moe {
namespace wg {

template <int kNT, int kStagesT, Epi kEpi, int kTBoxes = 1>
struct SwapConfig {
  static constexpr int kStages = kStagesT;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr bool kSwiGlu = kEpi == Epi::kSwiGluFp8;
  static constexpr int kWRows = 64 * kConsumers;             // weight rows per box (= output columns per unit)
  static constexpr int kWBoxes = kSwiGlu ? 2 : 1;            // x1 and x2 boxes, or one
  static constexpr int kWBytes = kWBoxes * kWRows * 128;
  static constexpr int kTBytes = kTBoxes * kNT * 128;        // token rows (hi, and lo when kTBoxes = 2)
  static constexpr int kSfaBox = kNT + 4;  // from row0 rounded down to 4 floats (TMA's 16-byte start rule)
  static constexpr int kSfaBytes = kSfaBox * 4;
  static constexpr int kSfaPitch = (kSfaBytes + 127) / 128 * 128;
  static constexpr uint32_t kTxBytes = kWBytes + kTBytes + kSfaBytes;
  static constexpr int kWStride = kWBytes, kTStride = kTBytes;  // ring strides per stage (the consumer's view)
  static constexpr int kOffW = 0;
  static constexpr int kOffT = kOffW + kStages * kWBytes;
  static constexpr int kOffSfa = kOffT + kStages * kTBytes;
  static constexpr int kOffBar = kOffSfa + kStages * kSfaPitch;
  static constexpr int kOffTable = kOffBar + 2 * kStages * 8;
  // After the unit table (97 ints), the split factor, the row count and a last-split flag: 2 x [8 warps][kNT]
  // floats, 16-byte aligned.
  static constexpr int kOffXch = kOffTable + 100 * 4;
  static constexpr int kSmem = kOffXch + (kSwiGlu ? 2 * 8 * kNT * 4 : 0) + 1024;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static constexpr int kAcc = kNT / 2;

  static_assert(kNT == 16 || kNT == 32 || kNT == 64, "tokens per tile: a wgmma N of sm90_ptx.cuh");
  static_assert(kTBytes % 1024 == 0, "token tile: whole 8-row swizzle atoms");
  static_assert(kTBoxes == 1 || (kTBoxes == 2 && !kSwiGlu), "a lo token box is GEMM2's (the intermediate's)");
  static_assert(kOffXch % 16 == 0, "exchange buffer alignment");
  static_assert(kSmem <= 227 * 1024, "shared memory budget (227 KB per CTA)");
};

// Last split of a SwiGLU unit: x1 | x2 = its splits' partial sums in split order, then the epilogue of the unsplit
// path (silu(x2) * x1, per-(row, 128 columns) amax / 448 scale, e4m3 hi [+ lo]). Consumer warp w of 8 takes rows
// w, w + 8 of the unit, 4 columns per lane. Partial sums come from other SMs: read through L2 (ld.cg).
__device__ __forceinline__ void swiglu_finish_unit(const GemmArgs& a, const Unit& t, int splits, int rows_all,
                                                   int warp8, int lane) {
  const int n_half = a.n / 2, col = t.nu * 128 + 4 * lane;
#pragma unroll 1
  for (int r = warp8; r < t.rows; r += 8) {
    const int row = t.row0 + r;
    float x1[4] = {0.f, 0.f, 0.f, 0.f}, x2[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < splits; ++s) {
      const float* p = a.partial + (static_cast<size_t>(s) * rows_all + row) * a.n + col;
      const float4 u = __ldcg(reinterpret_cast<const float4*>(p)), g = __ldcg(reinterpret_cast<const float4*>(p + n_half));
      x1[0] += u.x, x1[1] += u.y, x1[2] += u.z, x1[3] += u.w;
      x2[0] += g.x, x2[1] += g.y, x2[2] += g.z, x2[3] += g.w;
    }
    float v[4], amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) amax = fmaxf(amax, fabsf(v[k] = silu_mul(x2[k], x1[k])));
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
    const BlockScale bs = e4m3_block_scale(amax);
    const float inv = bs.inv;
    uint32_t hi = 0, lo = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint8_t l;
      hi |= static_cast<uint32_t>(e4m3_hi_lo(v[k] * inv, l)) << (8 * k);
      lo |= static_cast<uint32_t>(l) << (8 * k);
    }
    uint8_t* dst = static_cast<uint8_t*>(a.out) + static_cast<size_t>(row) * a.ldo + col;
    *reinterpret_cast<uint32_t*>(dst) = hi;
    if (a.lo_rows > 0) *reinterpret_cast<uint32_t*>(dst + static_cast<size_t>(a.lo_rows) * a.ldo) = lo;
    if (lane == 0) a.out_scale[static_cast<size_t>(t.nu) * a.out_scale_ld + row] = bs.scale;
  }
}

// One unit of a swap-AB GEMM on the consumer warpgroups (threads 0 .. 255): K blocks [split k_blocks / splits,
// (split + 1) k_blocks / splits) of unit `t` from the ring that L describes (stage strides and offsets: SwapConfig
// itself, or the one-pass kernel's shared ring), then its epilogue. `unit` indexes args.unit_done, `last` is one
// int of shared memory. Returns true when the unit's output is complete after this call: it was not split, or it
// was a SwiGLU unit's last split, which finished it. Thread 0 calls before_count() right before it counts a split
// in args.unit_done (the one-pass kernel waits there until the counters are known to be zeroed).
struct NothingBeforeCount {
  __device__ void operator()() const {}
};
template <int kNT, Epi kEpi, int kTBoxes, class L, class BeforeCount = NothingBeforeCount>
__device__ __forceinline__ bool swap_consume_unit(const GemmArgs& args, const Unit& t, int unit, int split,
                                                  int splits, int rows_all, uint8_t* smem, uint32_t base, int* last,
                                                  uint32_t& stage, uint32_t& phase, int& parity,
                                                  BeforeCount before_count = {}) {
  using C = SwapConfig<kNT, L::kStages, kEpi, kTBoxes>;
  const uint32_t full0 = base + L::kOffBar, empty0 = full0 + 8 * L::kStages;
  const int tid = threadIdx.x, wgi = tid / 128;
  const int warp = (tid / 32) % 4, lane = tid % 32, quad = lane % 4;
  const int my_wrow = wgi * 64 + warp * 16 + lane / 4;  // weight row (output column) in the unit; second is +8
  const int nblk_b = args.n / 128;
  bool finished = splits == 1;
  const int kb_begin = split * args.k_blocks / splits, kb_end = (split + 1) * args.k_blocks / splits;
  const int col_b = t.nu * C::kWRows;  // first weight row of the unit inside the group (SwiGLU: x1)
  const float* sfb_x = args.sfb + (static_cast<size_t>(t.group) * nblk_b + col_b / 128) * args.k_blocks;
  const float* sfb_y =
      C::kSwiGlu ? args.sfb + (static_cast<size_t>(t.group) * nblk_b + (col_b + args.n / 2) / 128) * args.k_blocks
                 : sfb_x;
  float next_x = __ldg(sfb_x + kb_begin), next_y = __ldg(sfb_y + kb_begin);

  // part_y: SwiGLU's x2 partial sum, or (kTBoxes = 2) the lo tokens' partial sum of the same weights.
  constexpr int kY = C::kSwiGlu || kTBoxes == 2 ? C::kAcc : 1;
  float acc_x[C::kAcc], acc_y[C::kSwiGlu ? C::kAcc : 1], part_x[C::kAcc], part_y[kY];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc_x[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < (C::kSwiGlu ? C::kAcc : 1); ++i) acc_y[i] = 0.0f;
  // GEMM2: the routing weights of this thread's token columns 8i + 2 quad + j, loaded before the K loop so the
  // epilogue does not wait for them.
  float tok_w[kEpi == Epi::kBf16RowWeight ? C::kAcc / 2 : 1];
  if constexpr (kEpi == Epi::kBf16RowWeight) {
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int tok = 8 * i + 2 * quad + j;
        tok_w[2 * i + j] = args.row_weight != nullptr && tok < t.rows
                               ? load_l2_or_shared(args.row_weight + t.row0 + tok) : 1.0f;
      }
  }

#pragma unroll 1
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    const float sx = next_x, sy = next_y;
    if (kb + 1 < kb_end) {
      next_x = __ldg(sfb_x + kb + 1);
      next_y = __ldg(sfb_y + kb + 1);
    }
    sm90::mbar_wait(full0 + 8 * stage, phase);
    const float* sfa = reinterpret_cast<const float*>(smem + L::kOffSfa + stage * L::kSfaPitch) + (t.row0 & 3);
    float sa[C::kAcc / 2];  // scale_a of this thread's token columns 8i + 2 quad + j
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i) {
      sa[2 * i] = sfa[8 * i + 2 * quad];
      sa[2 * i + 1] = sfa[8 * i + 2 * quad + 1];
    }
    const uint32_t w_base = base + L::kOffW + stage * L::kWStride + wgi * 64 * 128;
    const uint64_t dx = sm90::desc_k_sw128(w_base);
    const uint64_t dy = sm90::desc_k_sw128(w_base + C::kWRows * 128);
    const uint64_t dt = sm90::desc_k_sw128(base + L::kOffT + stage * L::kTStride);
    const uint64_t dt_lo = sm90::desc_k_sw128(base + L::kOffT + stage * L::kTStride + kNT * 128);
    (void)dt_lo;
    sm90::fence_regs(part_x);
    if constexpr (kY > 1) sm90::fence_regs(part_y);
    sm90::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      sm90::wgmma_fp8<kNT>(part_x, dx + 2 * k, dt + 2 * k, k > 0);
      if constexpr (C::kSwiGlu) sm90::wgmma_fp8<kNT>(part_y, dy + 2 * k, dt + 2 * k, k > 0);
      if constexpr (kTBoxes == 2) sm90::wgmma_fp8<kNT>(part_y, dx + 2 * k, dt_lo + 2 * k, k > 0);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(part_x);
    if constexpr (kY > 1) sm90::fence_regs(part_y);
    if constexpr (kTBoxes == 2) {
#pragma unroll
      for (int i = 0; i < C::kAcc; ++i) part_x[i] += 0.0625f * part_y[i];  // hi + lo / 16, one weight scale
    }
    __syncwarp();  // every lane of the warp is done with the stage (its scales too)
    if (lane == 0) sm90::mbar_arrive(empty0 + 8 * stage);
    if (++stage == L::kStages) stage = 0, phase ^= 1;

#pragma unroll
    for (int i = 0; i < kNT / 8; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) {  // r: (row +8 if r >= 2) x (token column j = r % 2)
        acc_x[4 * i + r] += part_x[4 * i + r] * (sx * sa[2 * i + (r & 1)]);
        if constexpr (C::kSwiGlu) acc_y[4 * i + r] += part_y[4 * i + r] * (sy * sa[2 * i + (r & 1)]);
      }
  }

  // ------------------------------------------------------------------ epilogue
  const int out_col = t.nu * C::kWRows + my_wrow;  // output column of this thread's first row
  if (splits > 1) {
    // Partial sums of this split: row (t.row0 + token) of split `split`, columns out_col and out_col + 8 (x1), the
    // same + n/2 (SwiGLU's x2). The routing weight is linear, so GEMM2 applies it per split.
    float* dst_base = args.partial + static_cast<size_t>(split) * rows_all * args.n;
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int tok = 8 * i + 2 * quad + j;
        if (tok >= t.rows) continue;
        float w = 1.0f;
        if constexpr (kEpi == Epi::kBf16RowWeight) w = tok_w[2 * i + j];
        float* dst = dst_base + static_cast<size_t>(t.row0 + tok) * args.n + out_col;
        dst[0] = acc_x[4 * i + j] * w;
        dst[8] = acc_x[4 * i + 2 + j] * w;
        if constexpr (C::kSwiGlu) {
          dst[args.n / 2] = acc_y[4 * i + j];
          dst[args.n / 2 + 8] = acc_y[4 * i + 2 + j];
        }
      }
    if constexpr (C::kSwiGlu) {
      // Publish this split (each thread fences its own stores), count it; the unit's last split finishes it.
      __threadfence();
      sm90::named_barrier_sync(1, 128 * C::kConsumers);
      if (tid == 0) {
        before_count();
        *last = atomicAdd(args.unit_done + unit, 1) == splits - 1;
      }
      sm90::named_barrier_sync(1, 128 * C::kConsumers);
      finished = *last;
      if (finished) {
        __threadfence();
        swiglu_finish_unit(args, t, splits, rows_all, wgi * 4 + warp, lane);
      }
      sm90::named_barrier_sync(1, 128 * C::kConsumers);  // `last` is rewritten by the next unit
    }
  } else if constexpr (kEpi == Epi::kF32 || kEpi == Epi::kBf16RowWeight) {
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int tok = 8 * i + 2 * quad + j;
        if (tok >= t.rows) continue;
        const size_t at = static_cast<size_t>(t.row0 + tok) * args.ldo + out_col;
        if constexpr (kEpi == Epi::kF32) {
          float* dst = static_cast<float*>(args.out) + at;
          dst[0] = acc_x[4 * i + j];
          dst[8] = acc_x[4 * i + 2 + j];
        } else {
          const float w = tok_w[2 * i + j];
          __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(args.out) + at;
          dst[0] = __float2bfloat16_rn(acc_x[4 * i + j] * w);
          dst[8] = __float2bfloat16_rn(acc_x[4 * i + 2 + j] * w);
        }
      }
  } else {
    float v[C::kAcc];
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) v[i] = silu_mul(acc_y[i], acc_x[i]);  // silu(x2) * x1
    // amax per token column over this warp's 16 rows, then over the 8 consumer warps (shared memory).
    float* xch = reinterpret_cast<float*>(smem + L::kOffXch) + parity * 8 * kNT;
    const int cw = wgi * 4 + warp;  // consumer warp 0..7
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float m = fmaxf(fabsf(v[4 * i + j]), fabsf(v[4 * i + 2 + j]));
#pragma unroll
        for (int d = 4; d < 32; d <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
        if (lane < 4) xch[cw * kNT + 8 * i + 2 * quad + j] = m;
      }
    sm90::named_barrier_sync(1, 128 * C::kConsumers);
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int tok = 8 * i + 2 * quad + j;
        float amax = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; ++w) amax = fmaxf(amax, xch[w * kNT + tok]);
        if (tok >= t.rows) continue;
        const BlockScale bs = e4m3_block_scale(amax);
        const float inv = bs.inv;
        uint8_t* dst = static_cast<uint8_t*>(args.out) + static_cast<size_t>(t.row0 + tok) * args.ldo + out_col;
        uint8_t lo0, lo8;
        dst[0] = e4m3_hi_lo(v[4 * i + j] * inv, lo0);
        dst[8] = e4m3_hi_lo(v[4 * i + 2 + j] * inv, lo8);
        if (args.lo_rows > 0) {
          dst[static_cast<size_t>(args.lo_rows) * args.ldo] = lo0;
          dst[static_cast<size_t>(args.lo_rows) * args.ldo + 8] = lo8;
        }
        if (cw == 0 && lane < 4)
          args.out_scale[static_cast<size_t>(t.nu) * args.out_scale_ld + t.row0 + tok] = bs.scale;
      }
    parity ^= 1;  // the next unit writes the other buffer; its barrier orders this unit's reads before reuse
  }
  return finished;
}

template <int kNT, int kStages, Epi kEpi, int kTBoxes = 1>
__global__ void __launch_bounds__(384, 1)
    grouped_gemm_swap_kernel(const __grid_constant__ CUtensorMap tm_t, const __grid_constant__ CUtensorMap tm_sfa,
                             const __grid_constant__ CUtensorMap tm_w, const GemmArgs args) {
  using C = SwapConfig<kNT, kStages, kEpi, kTBoxes>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = sm90::smem_u32(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  const uint32_t base = sm90::smem_u32(smem);
  int* table = reinterpret_cast<int*>(smem + C::kOffTable);
  const uint32_t full0 = base + C::kOffBar, empty0 = full0 + 8 * kStages;
  const int tid = threadIdx.x, wgi = tid / 128;
  const int n_units = C::kSwiGlu ? args.n / 2 / C::kWRows : args.n / C::kWRows;

  if (tid == C::kConsumers * 128) {
    sm90::tma_prefetch_desc(&tm_t);
    sm90::tma_prefetch_desc(&tm_sfa);
    sm90::tma_prefetch_desc(&tm_w);
#pragma unroll 1
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(full0 + 8 * s, 1);
      sm90::mbar_init(empty0 + 8 * s, 4 * C::kConsumers);
    }
    sm90::mbar_fence_init();
  }
  // early_weights: the unit table and the weights need nothing from the kernel before, so only the producer waits,
  // after it has issued the first stages' weight boxes (they stream while that kernel finishes); the consumers
  // read only what the producer's later loads bring (and inputs final before this launch).
  const bool early = args.early_weights != 0;
  if (!early) sm90::pdl_wait();
  sm90::pdl_launch_dependents();  // every CTA is resident (one per SM): the next kernel may queue behind them
  if (tid < 32) {
    build_unit_table(args, kNT, n_units, table);
    __syncwarp();
    const int g = args.num_groups - 1, rows = table[65 + g] + table[33 + g];
    const bool can_split = args.partial != nullptr && (!C::kSwiGlu || args.unit_done != nullptr);
    const int s = !can_split ? 1 : choose_splits(table[32], rows, gridDim.x, args.k_blocks, args.partial_rows);
    if (tid == 0) {
      table[97] = s;
      table[98] = rows;
      if (blockIdx.x == 0 && args.splits_out != nullptr) *args.splits_out = s;
    }
  }
  __syncthreads();
  const int splits = table[97], rows_all = table[98];
  const int units = table[32] * splits;

  if (wgi == C::kConsumers) {
    // ---------------------------------------------------------------- producer
    sm90::setmaxnreg_dec<C::kProducerRegs>();
    if (tid != C::kConsumers * 128) return;
    // A stage's weight box(es), with the whole stage's transaction bytes (its tokens and scales follow).
    auto load_weights = [&](uint32_t stage, int kb, int w_row) {
      const uint32_t full = full0 + 8 * stage, w_dst = base + C::kOffW + stage * C::kWBytes;
      sm90::mbar_arrive_expect_tx(full, C::kTxBytes);
      sm90::tma_load_2d(w_dst, &tm_w, full, kb * 128, w_row);
      if constexpr (C::kSwiGlu) sm90::tma_load_2d(w_dst + C::kWRows * 128, &tm_w, full, kb * 128, w_row + args.n / 2);
    };
    int early_stages = 0;  // ring stages (in issue order) whose weights went out before pdl_wait
    if (early) {
#pragma unroll 1
      for (int u = blockIdx.x; u < units && early_stages < kStages; u += gridDim.x) {
        const Unit t = unit_at(table, u / splits, kNT);
        const int split = u % splits;
#pragma unroll 1
        for (int kb = split * args.k_blocks / splits;
             kb < (split + 1) * args.k_blocks / splits && early_stages < kStages; ++kb, ++early_stages)
          load_weights(early_stages, kb, t.group * args.n + t.nu * C::kWRows);
      }
      sm90::pdl_wait();  // the activations and their scales come from the kernel before
    }
    uint32_t stage = 0, phase = 0;
    int issued = 0;
#pragma unroll 1
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const Unit t = unit_at(table, u / splits, kNT);
      const int split = u % splits;
      const int w_row = t.group * args.n + t.nu * C::kWRows;  // first weight row (SwiGLU: of x1)
#pragma unroll 1
      for (int kb = split * args.k_blocks / splits; kb < (split + 1) * args.k_blocks / splits; ++kb, ++issued) {
        const uint32_t full = full0 + 8 * stage;
        if (issued >= early_stages) {
          sm90::mbar_wait(empty0 + 8 * stage, phase ^ 1);
          load_weights(stage, kb, w_row);
        }
        sm90::tma_load_2d(base + C::kOffT + stage * C::kTBytes, &tm_t, full, kb * 128, t.row0);
        if constexpr (kTBoxes == 2)
          sm90::tma_load_2d(base + C::kOffT + stage * C::kTBytes + kNT * 128, &tm_t, full, kb * 128,
                            t.row0 + args.lo_rows);
        sm90::tma_load_2d(base + C::kOffSfa + stage * C::kSfaPitch, &tm_sfa, full, t.row0 & ~3, kb);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  sm90::setmaxnreg_inc<C::kConsumerRegs>();
  uint32_t stage = 0, phase = 0;
  int parity = 0;  // exchange buffer of this unit (SwiGLU)

#pragma unroll 1
  for (int u = blockIdx.x; u < units; u += gridDim.x)
    swap_consume_unit<kNT, kEpi, kTBoxes, C>(args, unit_at(table, u / splits, kNT), u / splits, u % splits, splits,
                                             rows_all, smem, base, table + 99, stage, phase, parity);
}

}  // namespace wg
}  // namespace fused_moe

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
#pragma once

#include "moe_wgmma.cuh"

namespace fused_moe {
namespace wg {

template <int kNT, int kStages, Epi kEpi>
struct SwapConfig {
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr bool kSwiGlu = kEpi == Epi::kSwiGluFp8;
  static constexpr int kWRows = 64 * kConsumers;             // weight rows per box (= output columns per unit)
  static constexpr int kWBoxes = kSwiGlu ? 2 : 1;            // x1 and x2 boxes, or one
  static constexpr int kWBytes = kWBoxes * kWRows * 128;
  static constexpr int kTBytes = kNT * 128;                  // token rows
  static constexpr int kSfaBytes = kNT * 4;
  static constexpr int kSfaPitch = (kSfaBytes + 127) / 128 * 128;
  static constexpr uint32_t kTxBytes = kWBytes + kTBytes + kSfaBytes;
  static constexpr int kOffW = 0;
  static constexpr int kOffT = kOffW + kStages * kWBytes;
  static constexpr int kOffSfa = kOffT + kStages * kTBytes;
  static constexpr int kOffBar = kOffSfa + kStages * kSfaPitch;
  static constexpr int kOffTable = kOffBar + 2 * kStages * 8;
  static constexpr int kOffXch = kOffTable + 97 * 4 + 12;            // 16-byte aligned: 2 x [8 warps][kNT] floats
  static constexpr int kSmem = kOffXch + (kSwiGlu ? 2 * 8 * kNT * 4 : 0) + 1024;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static constexpr int kAcc = kNT / 2;

  static_assert(kNT == 16 || kNT == 32 || kNT == 64, "tokens per tile: a wgmma N of sm90_ptx.cuh");
  static_assert(kTBytes % 1024 == 0, "token tile: whole 8-row swizzle atoms");
  static_assert(kOffXch % 16 == 0, "exchange buffer alignment");
  static_assert(kSmem <= 227 * 1024, "shared memory budget (227 KB per CTA)");
};

template <int kNT, int kStages, Epi kEpi>
__global__ void __launch_bounds__(384, 1)
    grouped_gemm_swap_kernel(const __grid_constant__ CUtensorMap tm_t, const __grid_constant__ CUtensorMap tm_sfa,
                             const __grid_constant__ CUtensorMap tm_w, const GemmArgs args) {
  using C = SwapConfig<kNT, kStages, kEpi>;
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
  sm90::pdl_wait();
  if (tid < 32) build_unit_table(args, kNT, n_units, table);
  __syncthreads();
  const int units = table[32];

  if (wgi == C::kConsumers) {
    // ---------------------------------------------------------------- producer
    sm90::setmaxnreg_dec<C::kProducerRegs>();
    if (tid != C::kConsumers * 128) return;
    uint32_t stage = 0, phase = 0;
#pragma unroll 1
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const Unit t = unit_at(table, u, kNT);
      const int w_row = t.group * args.n + t.nu * C::kWRows;  // first weight row (SwiGLU: of x1)
#pragma unroll 1
      for (int kb = 0; kb < args.k_blocks; ++kb) {
        sm90::mbar_wait(empty0 + 8 * stage, phase ^ 1);
        const uint32_t full = full0 + 8 * stage;
        sm90::mbar_arrive_expect_tx(full, C::kTxBytes);
        const uint32_t w_dst = base + C::kOffW + stage * C::kWBytes;
        sm90::tma_load_2d(w_dst, &tm_w, full, kb * 128, w_row);
        if constexpr (C::kSwiGlu)
          sm90::tma_load_2d(w_dst + C::kWRows * 128, &tm_w, full, kb * 128, w_row + args.n / 2);
        sm90::tma_load_2d(base + C::kOffT + stage * C::kTBytes, &tm_t, full, kb * 128, t.row0);
        sm90::tma_load_2d(base + C::kOffSfa + stage * C::kSfaPitch, &tm_sfa, full, t.row0, kb);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  sm90::setmaxnreg_inc<C::kConsumerRegs>();
  const int warp = (tid / 32) % 4, lane = tid % 32, quad = lane % 4;
  const int my_wrow = wgi * 64 + warp * 16 + lane / 4;  // weight row (output column) in the unit; second is +8
  const int nblk_b = args.n / 128;
  uint32_t stage = 0, phase = 0;
  int parity = 0;  // exchange buffer of this unit (SwiGLU)

#pragma unroll 1
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const Unit t = unit_at(table, u, kNT);
    const int col_b = t.nu * C::kWRows;  // first weight row of the unit inside the group (SwiGLU: x1)
    const float* sfb_x = args.sfb + (static_cast<size_t>(t.group) * nblk_b + col_b / 128) * args.k_blocks;
    const float* sfb_y =
        C::kSwiGlu ? args.sfb + (static_cast<size_t>(t.group) * nblk_b + (col_b + args.n / 2) / 128) * args.k_blocks
                   : sfb_x;
    float next_x = __ldg(sfb_x), next_y = __ldg(sfb_y);

    float acc_x[C::kAcc], acc_y[C::kSwiGlu ? C::kAcc : 1], part_x[C::kAcc], part_y[C::kSwiGlu ? C::kAcc : 1];
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc_x[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (C::kSwiGlu ? C::kAcc : 1); ++i) acc_y[i] = 0.0f;

#pragma unroll 1
    for (int kb = 0; kb < args.k_blocks; ++kb) {
      const float sx = next_x, sy = next_y;
      if (kb + 1 < args.k_blocks) {
        next_x = __ldg(sfb_x + kb + 1);
        next_y = __ldg(sfb_y + kb + 1);
      }
      sm90::mbar_wait(full0 + 8 * stage, phase);
      const float* sfa = reinterpret_cast<const float*>(smem + C::kOffSfa + stage * C::kSfaPitch);
      float sa[C::kAcc / 2];  // scale_a of this thread's token columns 8i + 2 quad + j
#pragma unroll
      for (int i = 0; i < kNT / 8; ++i) {
        sa[2 * i] = sfa[8 * i + 2 * quad];
        sa[2 * i + 1] = sfa[8 * i + 2 * quad + 1];
      }
      const uint32_t w_base = base + C::kOffW + stage * C::kWBytes + wgi * 64 * 128;
      const uint64_t dx = sm90::desc_k_sw128(w_base);
      const uint64_t dy = sm90::desc_k_sw128(w_base + C::kWRows * 128);
      const uint64_t dt = sm90::desc_k_sw128(base + C::kOffT + stage * C::kTBytes);
      sm90::fence_regs(part_x);
      if constexpr (C::kSwiGlu) sm90::fence_regs(part_y);
      sm90::wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        sm90::wgmma_fp8<kNT>(part_x, dx + 2 * k, dt + 2 * k, k > 0);
        if constexpr (C::kSwiGlu) sm90::wgmma_fp8<kNT>(part_y, dy + 2 * k, dt + 2 * k, k > 0);
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::fence_regs(part_x);
      if constexpr (C::kSwiGlu) sm90::fence_regs(part_y);
      if (lane == 0) sm90::mbar_arrive(empty0 + 8 * stage);
      if (++stage == kStages) stage = 0, phase ^= 1;

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
    if constexpr (kEpi == Epi::kF32 || kEpi == Epi::kBf16RowWeight) {
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
            const float w = args.row_weight != nullptr ? args.row_weight[t.row0 + tok] : 1.0f;
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
      float* xch = reinterpret_cast<float*>(smem + C::kOffXch) + parity * 8 * kNT;
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
          const float inv = amax > 0.0f ? 448.0f / amax : 0.0f;
          uint8_t* dst = static_cast<uint8_t*>(args.out) + static_cast<size_t>(t.row0 + tok) * args.ldo + out_col;
          dst[0] = static_cast<uint8_t>(sm90::pack_e4m3x2(v[4 * i + j] * inv, 0.0f) & 0xFFu);
          dst[8] = static_cast<uint8_t>(sm90::pack_e4m3x2(v[4 * i + 2 + j] * inv, 0.0f) & 0xFFu);
          if (cw == 0 && lane < 4)
            args.out_scale[static_cast<size_t>(t.nu) * args.out_scale_ld + t.row0 + tok] = amax / 448.0f;
        }
      parity ^= 1;  // the next unit writes the other buffer; its barrier orders this unit's reads before reuse
    }
  }
}

}  // namespace wg
}  // namespace fused_moe

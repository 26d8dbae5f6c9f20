// Large-T path: grouped GEMMs over the local experts, rows = the expert's assignments (slots off_e .. off_e+n_e),
// tiles of BM rows, persistent CTAs walking (expert, n-tile, m-tile) in expert-major order so that one expert's
// weights and gathered activations are reused from L2 by the CTAs running at the same time.
//
// GEMM1 (gemm1_large_kernel): FP8 mma.m16n8k32, tile BM x 128 where the 128 weight rows are 64 up-projection rows
//   j0.. and the 64 matching gate rows 2048+j0.., so SwiGLU completes inside the tile. Activations are gathered by
//   token id with cp.async. Per-128-K partial sums are promoted with scale_x(row) * scale_w.
// GEMM2 (gemm2_large_kernel): bf16 mma.m16n8k16 on the bf16 intermediate and W2 widened from e4m3 in registers;
//   the epilogue writes routing-weight * result as bf16 per assignment (ypart[slot]).
// combine_kernel: out[t] = sum of ypart over t's local assignments in ascending expert order (fp32), zero if none.
#pragma once

#include "moe_common.cuh"

namespace fused_moe {

struct LargeArgs {
  const uint8_t* x;
  const float* x_scale;
  const uint8_t* w1;
  const float* w1_scale;
  const uint8_t* w2;
  const float* w2_scale;
  const MoeMeta* meta;
  const int* perm_tok;
  const float* perm_w;
  const int* slot_of;
  const uint32_t* mask;
  __nv_bfloat16* inter;  // [8T, 2048]
  __nv_bfloat16* ypart;  // [8T, 7168]
  __nv_bfloat16* out;    // [T, 7168]
  int T;
};

struct TileRef {
  int e, nt, slot0, rows;  // expert, n-tile, first slot of the m-tile, valid rows in it
};

// Per-CTA table of the tiles: expert e owns ceil(n_e / BM) m-tiles x NTILES n-tiles, numbered expert-major and
// m-tile fastest, so the CTAs running at the same time share one expert's weights and gathered rows in L2.
// Layout at `t` (ints): [0, 33) tiles before expert e, [33, 65) counts, [65, 97) first slots. Static functions over
// a base pointer (not a struct holding pointers): the GEMM1 accumulators leave no register to spare.
template <int BM, int NTILES>
struct TileTable {
  static constexpr int kBytes = 4 * (33 + 32 + 32);

  // Collective (all threads of the CTA): fills the table from the permutation's counts.
  static __device__ __forceinline__ void build(const MoeMeta* meta, int* t) {
    const int tid = threadIdx.x;
    if (tid < 32) {
      const int n = meta->counts[tid];
      t[tid + 1] = warp_inclusive_sum(ceil_div(n, BM) * NTILES);
      if (tid == 0) t[0] = 0;
      t[33 + tid] = n;
      t[65 + tid] = meta->offsets[tid];
    }
    __syncthreads();
  }

  static __device__ __forceinline__ int size(const int* t) { return t[32]; }

  static __device__ __forceinline__ TileRef at(const int* t, int u) {
    int e = 0;
    while (u >= t[e + 1]) ++e;
    const int r = u - t[e], n = t[33 + e];
    const int mtiles = ceil_div(n, BM);
    TileRef ref;
    ref.e = e;
    ref.nt = r / mtiles;
    const int m0 = (r % mtiles) * BM;
    ref.slot0 = t[65 + e] + m0;
    ref.rows = min(BM, n - m0);
    return ref;
  }
};

// ------------------------------------------------------------------------------------------------------------------
template <int BM, int STAGES>
struct Gemm1Large {
  static constexpr int kThreads = 256;  // 8 warps: 2 along M x 4 along N
  static constexpr int kBN = 128;
  static constexpr int kCols = 64;  // intermediate columns per tile
  static constexpr int kNTiles = kInter / kCols;
  static constexpr int kMT = BM / 32;  // m16 tiles per warp
  static constexpr int kTPR = kThreads / BM;
  static constexpr int kA = 0;
  static constexpr int kB = kA + BM * 128;
  static constexpr int kSa = kB + kBN * 128;
  static constexpr int kSw = kSa + BM * 4;
  static constexpr int kStage = (kSw + 16 + 127) / 128 * 128;
  static constexpr int kCPitch = kBN + 4;
  static constexpr int kRing = STAGES * kStage > BM * kCPitch * 4 ? STAGES * kStage : BM * kCPitch * 4;
  static constexpr int kTable = kRing;
  static constexpr int kSmem = kTable + TileTable<BM, kNTiles>::kBytes;
  static_assert(BM == 64 || BM == 128, "BM");
  static_assert(STAGES >= 2 && STAGES - 1 <= kHiddenBlocks, "pipeline");
  static_assert(kSmem <= 227 * 1024, "shared memory budget");
};

template <int BM, int STAGES>
__global__ void __launch_bounds__(256, 1) gemm1_large_kernel(LargeArgs a) {
  using C = Gemm1Large<BM, STAGES>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp >> 2, warp_n = warp & 3;
  const int g = lane >> 2, t4 = lane & 3;
  using Tiles = TileTable<BM, C::kNTiles>;
  int* table = reinterpret_cast<int*>(smem + C::kTable);
  Tiles::build(a.meta, table);
  const int a_row = tid / C::kTPR, a_sub = tid % C::kTPR;
  const int b_row = tid >> 1, b_sub = tid & 1;

#pragma unroll 1
  for (int u = blockIdx.x; u < Tiles::size(table); u += gridDim.x) {
    const TileRef tile = Tiles::at(table, u);
    const int j0 = tile.nt * C::kCols;
    const bool a_valid = a_row < tile.rows;
    const int tok = a_valid ? a.perm_tok[tile.slot0 + a_row] : 0;
    const int b_grow = tile.e * kGemm1Out + (b_row < 64 ? j0 + b_row : kInter + j0 + b_row - 64);
    const int sw_row = tile.e * kGemm1OutBlocks + (tid == 0 ? j0 : kInter + j0) / kBlock;

    // Addresses are rebuilt from these few ints at every issue: the accumulators leave no registers to spare.
    auto issue = [&](int buf, int kb) {
      uint8_t* st = smem + buf * C::kStage;
      const uint8_t* a_src = a.x + static_cast<size_t>(tok) * kHidden + kb * 128;
#pragma unroll
      for (int i = 0; i < 8 / C::kTPR; ++i) {
        const int ch = a_sub + i * C::kTPR;
        cp_async16(smem_addr(st + C::kA + swz<8>(a_row, ch)), a_src + ch * 16, a_valid);
      }
      if (a_sub == 0) cp_async4(smem_addr(st + C::kSa + a_row * 4), a.x_scale + static_cast<size_t>(kb) * a.T + tok, a_valid);
      const uint8_t* b_src = a.w1 + static_cast<size_t>(b_grow) * kHidden + kb * 128;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ch = b_sub + 2 * i;
        cp_async16(smem_addr(st + C::kB + swz<8>(b_row, ch)), b_src + ch * 16, true);
      }
      if (tid < 2) cp_async4(smem_addr(st + C::kSw + tid * 4), a.w1_scale + sw_row * kHiddenBlocks + kb, true);
    };

    float acc[C::kMT][4][4];
    zero(acc);

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      issue(s, s);
      cp_async_commit();
    }
#pragma unroll 1
    for (int kb = 0; kb < kHiddenBlocks; ++kb) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      if (kb + STAGES - 1 < kHiddenBlocks) issue((kb + STAGES - 1) % STAGES, kb + STAGES - 1);
      cp_async_commit();

      const uint8_t* st = smem + (kb % STAGES) * C::kStage;
      const uint32_t at = smem_addr(st + C::kA), bt = smem_addr(st + C::kB);
      float part[C::kMT][4][4];
      zero(part);
#pragma unroll 1  // one k32 step's fragments live at a time: full unrolling hoists them all and spills
      for (int q = 0; q < 4; ++q) {
        uint32_t bf[4][2];
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const int row = warp_n * 32 + (2 * p + (lane >> 4)) * 8 + (lane & 7);
          ldsm_x4(bt + swz<8>(row, 2 * q + ((lane >> 3) & 1)), bf[2 * p][0], bf[2 * p][1], bf[2 * p + 1][0],
                  bf[2 * p + 1][1]);
        }
#pragma unroll
        for (int m = 0; m < C::kMT; ++m) {
          uint32_t af[4];
          const int row = warp_m * (BM / 2) + m * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldsm_x4(at + swz<8>(row, 2 * q + (lane >> 4)), af[0], af[1], af[2], af[3]);
#pragma unroll
          for (int n = 0; n < 4; ++n) mma_e4m3(part[m][n], af, bf[n][0], bf[n][1]);
        }
      }
      const float* sa = reinterpret_cast<const float*>(st + C::kSa);
      const float sw = reinterpret_cast<const float*>(st + C::kSw)[warp_n >> 1];
#pragma unroll
      for (int m = 0; m < C::kMT; ++m) {
        const int r = warp_m * (BM / 2) + m * 16 + g;
        const float s0 = sa[r] * sw, s1 = sa[r + 8] * sw;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          acc[m][n][0] += part[m][n][0] * s0;
          acc[m][n][1] += part[m][n][1] * s0;
          acc[m][n][2] += part[m][n][2] * s1;
          acc[m][n][3] += part[m][n][3] * s1;
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();

    // Epilogue: tile -> smem (fp32), SwiGLU, bf16 x 2^64 in stored column order.
    float* cs = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int m = 0; m < C::kMT; ++m)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = warp_m * (BM / 2) + m * 16 + g + (i >> 1) * 8;
          const int col = warp_n * 32 + n * 8 + 2 * t4 + (i & 1);
          cs[row * C::kCPitch + col] = acc[m][n][i];
        }
    __syncthreads();
    for (int item = tid; item < BM * 4; item += C::kThreads) {
      const int row = item >> 2, grp = item & 3;
      if (row < tile.rows) {
        uint32_t packed[8];
#pragma unroll
        for (int p = 0; p < 16; p += 2) {
          const int j_a = grp * 16 + inter_true_col(p), j_b = grp * 16 + inter_true_col(p + 1);
          const float* r = cs + row * C::kCPitch;
          packed[p / 2] = pack_bf16x2(silu_times(r[64 + j_a], r[j_a]) * kInterStoreScale,
                                      silu_times(r[64 + j_b], r[j_b]) * kInterStoreScale);
        }
        uint4* dst = reinterpret_cast<uint4*>(a.inter + static_cast<size_t>(tile.slot0 + row) * kInter + j0 + grp * 16);
        dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
      }
    }
    __syncthreads();
  }
}

// ------------------------------------------------------------------------------------------------------------------
template <int BM, int STAGES>
struct Gemm2Large {
  static constexpr int kThreads = 256;
  static constexpr int kBN = 128;  // hidden columns per tile (one W2 scale block)
  static constexpr int kNTiles = kHidden / kBN;
  static constexpr int kMT = BM / 32;
  static constexpr int kTPR = kThreads / BM;
  static constexpr int kA = 0;                       // BM x 128 bf16 (256 B rows)
  static constexpr int kB = kA + BM * 256;           // 128 x 128 fp8
  static constexpr int kScale = kB + kBN * 128;
  static constexpr int kStage = (kScale + 16 + 127) / 128 * 128;
  static constexpr int kTable = STAGES * kStage;
  static constexpr int kSmem = kTable + TileTable<BM, kNTiles>::kBytes;
  static_assert(BM == 64 || BM == 128, "BM");
  static_assert(STAGES >= 2 && STAGES - 1 <= kInterBlocks, "pipeline");
  static_assert(kSmem <= 227 * 1024, "shared memory budget");
};

template <int BM, int STAGES>
__global__ void __launch_bounds__(256, 1) gemm2_large_kernel(LargeArgs a) {
  using C = Gemm2Large<BM, STAGES>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp >> 2, warp_n = warp & 3;
  const int g = lane >> 2, t4 = lane & 3;
  using Tiles = TileTable<BM, C::kNTiles>;
  int* table = reinterpret_cast<int*>(smem + C::kTable);
  Tiles::build(a.meta, table);
  const int a_row = tid / C::kTPR, a_sub = tid % C::kTPR;
  const int b_row = tid >> 1, b_sub = tid & 1;

#pragma unroll 1
  for (int u = blockIdx.x; u < Tiles::size(table); u += gridDim.x) {
    const TileRef tile = Tiles::at(table, u);
    const int n0 = tile.nt * C::kBN;
    const bool a_valid = a_row < tile.rows;
    const __nv_bfloat16* a_src = a.inter + static_cast<size_t>(a_valid ? tile.slot0 + a_row : 0) * kInter;
    const uint8_t* b_src = a.w2 + (static_cast<size_t>(tile.e) * kHidden + n0 + b_row) * kInter;
    const float* s_src = a.w2_scale + (static_cast<size_t>(tile.e) * kHiddenBlocks + n0 / kBlock) * kInterBlocks;

    auto issue = [&](int buf, int kb) {
      uint8_t* st = smem + buf * C::kStage;
#pragma unroll
      for (int i = 0; i < 16 / C::kTPR; ++i) {
        const int ch = a_sub + i * C::kTPR;
        cp_async16(smem_addr(st + C::kA + swz<16>(a_row, ch)), a_src + kb * 128 + ch * 8, a_valid);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ch = b_sub + 2 * i;
        cp_async16(smem_addr(st + C::kB + swz<8>(b_row, ch)), b_src + kb * 128 + ch * 16, true);
      }
      if (tid == 0) cp_async4(smem_addr(st + C::kScale), s_src + kb, true);
    };

    float acc[C::kMT][4][4];
    zero(acc);

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      issue(s, s);
      cp_async_commit();
    }
#pragma unroll 1
    for (int kb = 0; kb < kInterBlocks; ++kb) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      if (kb + STAGES - 1 < kInterBlocks) issue((kb + STAGES - 1) % STAGES, kb + STAGES - 1);
      cp_async_commit();

      const uint8_t* st = smem + (kb % STAGES) * C::kStage;
      const uint32_t at = smem_addr(st + C::kA), bt = smem_addr(st + C::kB);
      float part[C::kMT][4][4];
      zero(part);
#pragma unroll 1  // one k32 step's fragments live at a time: full unrolling hoists them all and spills
      for (int q = 0; q < 4; ++q) {
        uint32_t blo[4][2], bhi[4][2];  // [n-tile][k16 half]: widened W2, true k 32q+16s+4t..4t+3
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const int row = warp_n * 32 + (2 * p + (lane >> 4)) * 8 + (lane & 7);
          uint32_t f0, f1, f2, f3;
          ldsm_x4(bt + swz<8>(row, 2 * q + ((lane >> 3) & 1)), f0, f1, f2, f3);
          widen_e4m3x4(f0, blo[2 * p][0], bhi[2 * p][0]);
          widen_e4m3x4(f1, blo[2 * p][1], bhi[2 * p][1]);
          widen_e4m3x4(f2, blo[2 * p + 1][0], bhi[2 * p + 1][0]);
          widen_e4m3x4(f3, blo[2 * p + 1][1], bhi[2 * p + 1][1]);
        }
#pragma unroll
        for (int s = 0; s < 2; ++s) {
#pragma unroll
          for (int m = 0; m < C::kMT; ++m) {
            uint32_t a0, a1, a2, a3;
            const int row = warp_m * (BM / 2) + m * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldsm_x4(at + swz<16>(row, 4 * q + 2 * s + (lane >> 4)), a0, a1, a2, a3);
#pragma unroll
            for (int n = 0; n < 4; ++n) mma_bf16(part[m][n], a0, a1, a2, a3, blo[n][s], bhi[n][s]);
          }
        }
      }
      const float sc = *reinterpret_cast<const float*>(st + C::kScale) * kGemm2Unscale;
#pragma unroll
      for (int m = 0; m < C::kMT; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[m][n][i] += part[m][n][i] * sc;
    }
    cp_async_wait<0>();

    // Epilogue: routing weight, bf16, one row per assignment slot.
#pragma unroll
    for (int m = 0; m < C::kMT; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_m * (BM / 2) + m * 16 + g + h * 8;
        if (row < tile.rows) {
          const float w = a.perm_w[tile.slot0 + row];
          __nv_bfloat16* dst = a.ypart + static_cast<size_t>(tile.slot0 + row) * kHidden + n0 + warp_n * 32 + 2 * t4;
#pragma unroll
          for (int n = 0; n < 4; ++n)
            *reinterpret_cast<uint32_t*>(dst + n * 8) = pack_bf16x2(acc[m][n][2 * h] * w, acc[m][n][2 * h + 1] * w);
        }
      }
    __syncthreads();
  }
}

// ------------------------------------------------------------------------------------------------------------------
// One CTA of 128 threads per token (grid-stride): 896 vectors of 8 bf16 per row.
__global__ void __launch_bounds__(128) combine_kernel(LargeArgs a) {
  __shared__ int s_slots[kMaxLocalPerToken];
  __shared__ int s_n;
#pragma unroll 1
  for (int t = blockIdx.x; t < a.T; t += gridDim.x) {
    if (threadIdx.x == 0) s_n = __popc(a.mask[t]);
    if (threadIdx.x < kMaxLocalPerToken) s_slots[threadIdx.x] = a.slot_of[t * kMaxLocalPerToken + threadIdx.x];
    __syncthreads();
    const int n = s_n;
    for (int v = threadIdx.x; v < kHidden / 8; v += blockDim.x) {
      float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int r = 0; r < n; ++r) {
        const uint4 raw = *reinterpret_cast<const uint4*>(a.ypart + static_cast<size_t>(s_slots[r]) * kHidden + v * 8);
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          sum[2 * k] += __uint_as_float(w[k] << 16);
          sum[2 * k + 1] += __uint_as_float(w[k] & 0xFFFF0000u);
        }
      }
      *reinterpret_cast<uint4*>(a.out + static_cast<size_t>(t) * kHidden + v * 8) =
          make_uint4(pack_bf16x2(sum[0], sum[1]), pack_bf16x2(sum[2], sum[3]), pack_bf16x2(sum[4], sum[5]),
                     pack_bf16x2(sum[6], sum[7]));
    }
    __syncthreads();
  }
}

}  // namespace fused_moe

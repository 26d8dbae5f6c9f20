// Small-T path (T <= TMAX): weight-bandwidth bound, so every active expert's weights are streamed exactly once,
// spread over all SMs, with all of that expert's tokens handled per weight tile ("swap AB": weight rows are the
// MMA's M dimension, tokens its N dimension, so 1..8 tokens cost one n8 tile).
//
// GEMM1 (gemm1_small_kernel): work unit = (local expert, token chunk of TOKC, 16 intermediate columns). A unit's
//   32 weight rows (16 up-projection rows j0.. and the 16 matching gate rows 2048+j0..) x 7168 are split over the
//   CTA's warps by 128-wide K blocks (warp w takes blocks w, w+WARPS, ...), reduced through shared memory, then
//   SwiGLU'd and stored as bf16 (x 2^64) at the assignments' slots. Persistent CTAs walk units with one cp.async
//   pipeline that runs across unit boundaries, so the next unit's weights are in flight during an epilogue.
// GEMM2 (gemm2_small_kernel): one CTA per WARPS*16 hidden rows; it walks every (active expert, token chunk) unit,
//   accumulating weight * (C . W2^T) into a [T, rows] fp32 tile in shared memory, and finally writes every output
//   element of its columns for all T tokens (zeros where no local expert was picked). No atomics, deterministic.
#pragma once

#include "moe_common.cuh"

namespace fused_moe {

struct SmallArgs {
  const uint8_t* x;          // hidden_states fp8 [T, 7168]
  const float* x_scale;      // [56, T]
  const uint8_t* w1;         // [32, 4096, 7168]
  const float* w1_scale;     // [32, 32, 56]
  const uint8_t* w2;         // [32, 7168, 2048]
  const float* w2_scale;     // [32, 56, 16]
  const MoeMeta* meta;
  const int* perm_tok;
  const float* perm_w;
  __nv_bfloat16* inter;      // [8T, 2048] (stored column order, x 2^64)
  __nv_bfloat16* out;        // [T, 7168]
  int T;
};

// ------------------------------------------------------------------------------------------------------------------
template <int WARPS, int STAGES, int TOKC, int TMAX>
struct Gemm1Small {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRows = 32;            // weight rows per unit: 16 up + 16 gate
  static constexpr int kCols = 16;            // intermediate columns per unit
  static constexpr int kColBlocks = kInter / kCols;  // 128 units per (expert, chunk)
  static constexpr int kSteps = kHiddenBlocks / WARPS;
  static constexpr int kNT = TOKC / 8;
  static constexpr int kTPR = kThreads / TOKC;       // threads per activation row when loading
  static constexpr int kXChunksPerThread = WARPS * 8 / kTPR;
  static constexpr int kRedPitch = TOKC + 4;
  // stage layout (bytes)
  static constexpr int kW = 0;
  static constexpr int kX = kW + WARPS * kRows * 128;
  static constexpr int kSx = kX + WARPS * TOKC * 128;
  static constexpr int kSw = kSx + WARPS * TOKC * 4;
  static constexpr int kStage = (kSw + WARPS * 2 * 4 + 127) / 128 * 128;
  static constexpr int kRed = STAGES * kStage;
  static constexpr int kTok = kRed + WARPS * kRows * kRedPitch * 4;
  static constexpr int kPrefix = kTok + kMaxLocalPerToken * TMAX * 4;
  static constexpr int kSmem = kPrefix + 4 * 33 + 4 * 64;

  static_assert(kHiddenBlocks % WARPS == 0, "WARPS must divide the 56 K blocks");
  static_assert(TOKC % 8 == 0 && TOKC <= 32, "TOKC: multiple of 8, at most 32");
  static_assert(kThreads % TOKC == 0 && kTPR >= WARPS && (WARPS * 8) % kTPR == 0, "activation load mapping");
  static_assert(kThreads >= 2 * WARPS, "weight-scale load mapping");
  static_assert(kSteps >= 1 && STAGES >= 2, "pipeline");
  static_assert(kSmem <= 227 * 1024, "shared memory budget");
};

struct UnitG1 {
  int e, tok0, ntok, j0;
};

template <int WARPS, int STAGES, int TOKC, int TMAX>
__global__ void __launch_bounds__(WARPS * 32) gemm1_small_kernel(SmallArgs a) {
  using C = Gemm1Small<WARPS, STAGES, TOKC, TMAX>;
  extern __shared__ __align__(128) uint8_t smem[];
  int* s_tok = reinterpret_cast<int*>(smem + C::kTok);
  int* s_prefix = reinterpret_cast<int*>(smem + C::kPrefix);       // [33] units before expert e
  int* s_cnt = s_prefix + 33;                                         // [32]
  int* s_off = s_cnt + 32;                                            // [32]
  float* s_red = reinterpret_cast<float*>(smem + C::kRed);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  if (tid < 32) {
    const int n = a.meta->counts[tid];
    s_prefix[tid + 1] = warp_inclusive_sum(ceil_div(n, TOKC) * C::kColBlocks);
    if (tid == 0) s_prefix[0] = 0;
    s_cnt[tid] = n;
    s_off[tid] = a.meta->offsets[tid];
  }
  __syncthreads();
  const int total_assign = s_off[31] + s_cnt[31];
  for (int i = tid; i < total_assign; i += C::kThreads) s_tok[i] = a.perm_tok[i];
  const int num_units = s_prefix[32];
  const int my_units = num_units > (int)blockIdx.x ? ceil_div(num_units - blockIdx.x, gridDim.x) : 0;
  const int total_steps = my_units * C::kSteps;
  __syncthreads();
  if (total_steps == 0) return;

  auto decode = [&](int k) {
    const int u = blockIdx.x + k * gridDim.x;
    int e = 0;
    while (u >= s_prefix[e + 1]) ++e;
    const int r = u - s_prefix[e];
    const int chunk = r / C::kColBlocks;
    UnitG1 d;
    d.e = e;
    d.tok0 = s_off[e] + chunk * TOKC;
    d.ntok = min(TOKC, s_cnt[e] - chunk * TOKC);
    d.j0 = (r % C::kColBlocks) * C::kCols;
    return d;
  };

  // ---- producer: one pipeline stage = WARPS consecutive K blocks of one unit ----
  const int x_row = tid / C::kTPR, x_sub = tid % C::kTPR;
  auto issue = [&](int buf, const UnitG1& d, int ks) {
    uint8_t* st = smem + buf * C::kStage;
    const int kb0 = ks * WARPS;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = tid + i * C::kThreads;
      const int row = c / (WARPS * 8), cc = c % (WARPS * 8), kbw = cc / 8, ch = cc % 8;
      const int grow = row < 16 ? d.j0 + row : kInter + d.j0 + row - 16;
      const uint8_t* src = a.w1 + (static_cast<size_t>(d.e) * kGemm1Out + grow) * kHidden + (kb0 + kbw) * 128 + ch * 16;
      cp_async16(smem_addr(st + C::kW + kbw * (C::kRows * 128) + swz<8>(row, ch)), src, true);
    }
    const bool xv = x_row < d.ntok;
    const int tok = xv ? s_tok[d.tok0 + x_row] : 0;
#pragma unroll
    for (int i = 0; i < C::kXChunksPerThread; ++i) {
      const int cc = x_sub + i * C::kTPR, kbw = cc / 8, ch = cc % 8;
      const uint8_t* src = a.x + static_cast<size_t>(tok) * kHidden + (kb0 + kbw) * 128 + ch * 16;
      cp_async16(smem_addr(st + C::kX + kbw * (TOKC * 128) + swz<8>(x_row, ch)), src, xv);
    }
    if (x_sub < WARPS) {
      const float* src = a.x_scale + static_cast<size_t>(kb0 + x_sub) * a.T + tok;
      cp_async4(smem_addr(st + C::kSx + (x_sub * TOKC + x_row) * 4), src, xv);
    }
    if (tid < 2 * WARPS) {
      const int kbw = tid >> 1, nb = (tid & 1) ? (kInter + d.j0) / kBlock : d.j0 / kBlock;
      const float* src = a.w1_scale + (static_cast<size_t>(d.e) * kGemm1OutBlocks + nb) * kHiddenBlocks + kb0 + kbw;
      cp_async4(smem_addr(st + C::kSw + tid * 4), src, true);
    }
  };

  float acc[2][C::kNT][4];
  zero(acc);

  // ---- consumer: warp `warp` multiplies K block `warp` of the stage ----
  auto compute = [&](int buf, const UnitG1& d) {
    const uint8_t* st = smem + buf * C::kStage;
    const uint32_t wt = smem_addr(st + C::kW + warp * (C::kRows * 128));
    const uint32_t xt = smem_addr(st + C::kX + warp * (TOKC * 128));
    float part[2][C::kNT][4];
    zero(part);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t af[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int row = m * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldsm_x4(wt + swz<8>(row, 2 * q + (lane >> 4)), af[m][0], af[m][1], af[m][2], af[m][3]);
      }
#pragma unroll
      for (int n = 0; n < C::kNT; ++n) {
        if (n * 8 < d.ntok) {
          uint32_t b0, b1;
          ldsm_x2(xt + swz<8>(n * 8 + (lane & 7), 2 * q + ((lane >> 3) & 1)), b0, b1);
          mma_e4m3(part[0][n], af[0], b0, b1);
          mma_e4m3(part[1][n], af[1], b0, b1);
        }
      }
    }
    const float* sx = reinterpret_cast<const float*>(st + C::kSx) + warp * TOKC;
    const float* sw = reinterpret_cast<const float*>(st + C::kSw) + warp * 2;
#pragma unroll
    for (int n = 0; n < C::kNT; ++n) {
      const int col = n * 8 + 2 * (lane & 3);
      const float sx0 = sx[col], sx1 = sx[col + 1];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const float s = sw[m];
        acc[m][n][0] += part[m][n][0] * (s * sx0);
        acc[m][n][1] += part[m][n][1] * (s * sx1);
        acc[m][n][2] += part[m][n][2] * (s * sx0);
        acc[m][n][3] += part[m][n][3] * (s * sx1);
      }
    }
  };

  // ---- epilogue: reduce the WARPS partial sums, SwiGLU, store bf16 x 2^64 in stored column order ----
  auto epilogue = [&](const UnitG1& d) {
    float* red = s_red + warp * C::kRows * C::kRedPitch;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int n = 0; n < C::kNT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = m * 16 + g + (i >> 1) * 8, col = n * 8 + 2 * t + (i & 1);
          red[row * C::kRedPitch + col] = acc[m][n][i];
          acc[m][n][i] = 0.0f;
        }
    __syncthreads();
    for (int item = tid; item < TOKC * 4; item += C::kThreads) {
      const int tok = item >> 2, p0 = (item & 3) * 4;
      if (tok < d.ntok) {
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int j = inter_true_col(p0 + k);
          float up = 0.0f, gate = 0.0f;
#pragma unroll
          for (int w = 0; w < WARPS; ++w) {
            up += s_red[(w * C::kRows + j) * C::kRedPitch + tok];
            gate += s_red[(w * C::kRows + 16 + j) * C::kRedPitch + tok];
          }
          v[k] = silu_times(gate, up) * kInterStoreScale;
        }
        uint2 packed = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
        *reinterpret_cast<uint2*>(a.inter + static_cast<size_t>(d.tok0 + tok) * kInter + d.j0 + p0) = packed;
      }
    }
  };

  // ---- one pipeline over all (unit, k-step) pairs of this CTA ----
  UnitG1 iu = decode(0), cu = iu;
  int i_unit = 0, i_ks = 0, c_unit = 0, c_ks = 0;
  auto advance_issue = [&]() {
    if (++i_ks == C::kSteps) {
      i_ks = 0;
      if (++i_unit < my_units) iu = decode(i_unit);
    }
  };
#pragma unroll 1
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < total_steps) {
      issue(s, iu, i_ks);
      advance_issue();
    }
    cp_async_commit();
  }
#pragma unroll 1
  for (int s = 0; s < total_steps; ++s) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (s + STAGES - 1 < total_steps) {
      issue((s + STAGES - 1) % STAGES, iu, i_ks);
      advance_issue();
    }
    cp_async_commit();
    compute(s % STAGES, cu);
    if (++c_ks == C::kSteps) {
      epilogue(cu);
      c_ks = 0;
      if (++c_unit < my_units) cu = decode(c_unit);
    }
  }
  cp_async_wait<0>();
}

// ------------------------------------------------------------------------------------------------------------------
template <int WARPS, int STAGES, int TOKC, int TMAX>
struct Gemm2Small {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRows = WARPS * 16;  // hidden rows per CTA
  static constexpr int kNT = TOKC / 8;
  static constexpr int kMaxUnits = kLocalExperts + kMaxLocalPerToken * TMAX / TOKC;
  static constexpr int kOutPitch = kRows + 4;
  static constexpr int kW = 0;
  static constexpr int kC = kW + kRows * 128;
  static constexpr int kScale = kC + TOKC * 256;
  static constexpr int kStage = kScale + 128;
  static constexpr int kOut = STAGES * kStage;
  static constexpr int kTok = kOut + TMAX * kOutPitch * 4;
  static constexpr int kWt = kTok + kMaxLocalPerToken * TMAX * 4;
  static constexpr int kUnits = kWt + kMaxLocalPerToken * TMAX * 4;
  static constexpr int kSmem = kUnits + kMaxUnits * 3 * 4 + 4;

  static_assert(kHidden % kRows == 0 && kBlock % kRows == 0, "CTA rows must tile 7168 inside one scale block");
  static_assert(TOKC % 8 == 0, "TOKC multiple of 8");
  static_assert((kRows * 8) % kThreads == 0 && (TOKC * 16) % kThreads == 0, "load mapping");
  static_assert(kSmem <= 227 * 1024, "shared memory budget");
};

template <int WARPS, int STAGES, int TOKC, int TMAX>
__global__ void __launch_bounds__(WARPS * 32) gemm2_small_kernel(SmallArgs a) {
  using C = Gemm2Small<WARPS, STAGES, TOKC, TMAX>;
  extern __shared__ __align__(128) uint8_t smem[];
  float* s_out = reinterpret_cast<float*>(smem + C::kOut);
  int* s_tok = reinterpret_cast<int*>(smem + C::kTok);
  float* s_wt = reinterpret_cast<float*>(smem + C::kWt);
  int* s_ue = reinterpret_cast<int*>(smem + C::kUnits);  // unit -> expert, first slot, token count
  int* s_u0 = s_ue + C::kMaxUnits;
  int* s_un = s_u0 + C::kMaxUnits;
  int* s_nunits = s_un + C::kMaxUnits;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * C::kRows;

  if (tid == 0) {
    int k = 0;
    for (int e = 0; e < kLocalExperts; ++e) {
      const int n = a.meta->counts[e], off = a.meta->offsets[e];
      for (int c = 0; c < n; c += TOKC) {
        s_ue[k] = e;
        s_u0[k] = off + c;
        s_un[k] = min(TOKC, n - c);
        ++k;
      }
    }
    *s_nunits = k;
  }
  for (int i = tid; i < a.T * C::kOutPitch; i += C::kThreads) s_out[i] = 0.0f;
  __syncthreads();
  const int num_units = *s_nunits;
  const int total_assign = num_units ? s_u0[num_units - 1] + s_un[num_units - 1] : 0;
  for (int i = tid; i < total_assign; i += C::kThreads) {
    s_tok[i] = a.perm_tok[i];
    s_wt[i] = a.perm_w[i];
  }
  __syncthreads();
  const int total_steps = num_units * kInterBlocks;

  auto issue = [&](int buf, int step) {
    const int u = step / kInterBlocks, kb = step % kInterBlocks;
    const int e = s_ue[u], tok0 = s_u0[u], ntok = s_un[u];
    uint8_t* st = smem + buf * C::kStage;
#pragma unroll
    for (int i = 0; i < C::kRows * 8 / C::kThreads; ++i) {
      const int c = tid + i * C::kThreads, row = c / 8, ch = c % 8;
      const uint8_t* src = a.w2 + (static_cast<size_t>(e) * kHidden + n0 + row) * kInter + kb * 128 + ch * 16;
      cp_async16(smem_addr(st + C::kW + swz<8>(row, ch)), src, true);
    }
#pragma unroll
    for (int i = 0; i < TOKC * 16 / C::kThreads; ++i) {
      const int c = tid + i * C::kThreads, row = c / 16, ch = c % 16;
      const bool v = row < ntok;
      const __nv_bfloat16* src = a.inter + static_cast<size_t>(v ? tok0 + row : 0) * kInter + kb * 128 + ch * 8;
      cp_async16(smem_addr(st + C::kC + swz<16>(row, ch)), src, v);
    }
    if (tid == 0) {
      const float* src = a.w2_scale + (static_cast<size_t>(e) * kHiddenBlocks + n0 / kBlock) * kInterBlocks + kb;
      cp_async4(smem_addr(st + C::kScale), src, true);
    }
  };

  float acc[C::kNT][4];
  zero(acc);

  auto compute = [&](int buf, int ntok) {
    const uint8_t* st = smem + buf * C::kStage;
    const uint32_t wt = smem_addr(st + C::kW);
    const uint32_t ct = smem_addr(st + C::kC);
    float part[C::kNT][4];
    zero(part);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t r0, r1, r2, r3;
      ldsm_x4(wt + swz<8>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * q + (lane >> 4)), r0, r1, r2, r3);
      uint32_t a0l, a0h, a1l, a1h, a2l, a2h, a3l, a3h;
      widen_e4m3x4(r0, a0l, a0h);  // row g,   true k 32q + 4t..4t+3
      widen_e4m3x4(r1, a1l, a1h);  // row g+8, same k
      widen_e4m3x4(r2, a2l, a2h);  // row g,   true k 32q + 16 + 4t..
      widen_e4m3x4(r3, a3l, a3h);  // row g+8
#pragma unroll
      for (int n = 0; n < C::kNT; ++n) {
        if (n * 8 < ntok) {
          uint32_t b0, b1, b2, b3;  // stored k 32q + 0..7, 8..15, 16..23, 24..31 of tokens 8n..8n+7
          ldsm_x4(ct + swz<16>(n * 8 + (lane & 7), 4 * q + (lane >> 3)), b0, b1, b2, b3);
          mma_bf16(part[n], a0l, a1l, a0h, a1h, b0, b1);
          mma_bf16(part[n], a2l, a3l, a2h, a3h, b2, b3);
        }
      }
    }
    const float s = *reinterpret_cast<const float*>(st + C::kScale) * kGemm2Unscale;
#pragma unroll
    for (int n = 0; n < C::kNT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] += part[n][i] * s;
  };

  auto finish_unit = [&](int u) {
    const int tok0 = s_u0[u], ntok = s_un[u];
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < C::kNT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int slot = n * 8 + 2 * t + (i & 1);
        if (slot < ntok) {
          const int row = warp * 16 + g + (i >> 1) * 8;
          s_out[s_tok[tok0 + slot] * C::kOutPitch + row] += acc[n][i] * s_wt[tok0 + slot];
        }
        acc[n][i] = 0.0f;
      }
    __syncwarp();
  };

#pragma unroll 1
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < total_steps) issue(s, s);
    cp_async_commit();
  }
#pragma unroll 1
  for (int s = 0; s < total_steps; ++s) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (s + STAGES - 1 < total_steps) issue((s + STAGES - 1) % STAGES, s + STAGES - 1);
    cp_async_commit();
    const int u = s / kInterBlocks;
    compute(s % STAGES, s_un[u]);
    if (s % kInterBlocks == kInterBlocks - 1) finish_unit(u);
  }
  cp_async_wait<0>();
  __syncthreads();
  constexpr int kVec = C::kRows / 8;
  for (int i = tid; i < a.T * kVec; i += C::kThreads) {
    const int tok = i / kVec, c8 = (i % kVec) * 8;
    const float* src = s_out + tok * C::kOutPitch + c8;
    uint4 v = make_uint4(pack_bf16x2(src[0], src[1]), pack_bf16x2(src[2], src[3]), pack_bf16x2(src[4], src[5]),
                         pack_bf16x2(src[6], src[7]));
    *reinterpret_cast<uint4*>(a.out + static_cast<size_t>(tok) * kHidden + n0 + c8) = v;
  }
}

}  // namespace fused_moe

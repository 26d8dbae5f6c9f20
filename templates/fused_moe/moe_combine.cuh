// Deterministic combine: out[t] = sum over token t's local assignments (ascending expert id) of its routing-weighted
// GEMM2 rows, in fp32, then bf16; zero for a token with no local expert. GEMM2 leaves either one bf16 row per
// assignment (ypart) or, when its swap-AB pass split K, `splits` fp32 partial rows per assignment (part2), added
// here in split order.
#pragma once

#include "moe_common.cuh"
#include "sm90_ptx.cuh"

namespace fused_moe {

struct CombineArgs {
  const MoeMeta* meta;
  const uint32_t* mask;        // [T] local-expert mask per token
  const int* slot_of;          // [T * 8] slots of a token's local assignments, ascending expert id
  const __nv_bfloat16* ypart;  // [rows][7168] (splits == 1)
  const float* part2;          // [splits][rows][7168] (splits > 1)
  const int* splits;           // splits[1]: GEMM2's split factor
  __nv_bfloat16* out;          // [T][7168]
  int T;
};

// Items are (token, 1024-column chunk): 7 per token, one CTA of 128 threads each (grid-stride), so even one token
// spreads over several SMs.
constexpr int kCombineCols = 1024;
constexpr int kCombineChunks = kHidden / kCombineCols;

// out[t][col .. col + 8) = bf16(sum over token t's local assignments (`n` slots, ascending expert id) of their
// GEMM2 rows): ypart (splits == 1) or the `splits` f32 partial rows of part2, in split order. Rows come from other
// CTAs (of this kernel, or of the one before it): read through L2.
__device__ __forceinline__ void combine_8(const __nv_bfloat16* ypart, const float* part2, int splits, int rows,
                                          const int* slots, int n, __nv_bfloat16* out_row, int col) {
  float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (splits == 1) {
    // Every row's load issued before the first add (n <= 8): one L2/HBM round trip per item instead of n, which
    // a loop over n would serialise; the adds keep the slot order.
    uint4 raw[kMaxLocalPerToken];
#pragma unroll
    for (int r = 0; r < kMaxLocalPerToken; ++r)
      if (r < n) raw[r] = __ldcg(reinterpret_cast<const uint4*>(ypart + static_cast<size_t>(slots[r]) * kHidden + col));
#pragma unroll
    for (int r = 0; r < kMaxLocalPerToken; ++r) {
      if (r >= n) break;
      const uint32_t w[4] = {raw[r].x, raw[r].y, raw[r].z, raw[r].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        sum[2 * k] += __uint_as_float(w[k] << 16);
        sum[2 * k + 1] += __uint_as_float(w[k] & 0xFFFF0000u);
      }
    }
  } else {
    for (int r = 0; r < n; ++r) {
      const int slot = slots[r];
      for (int s = 0; s < splits; ++s) {
        const float4* p =
            reinterpret_cast<const float4*>(part2 + (static_cast<size_t>(s) * rows + slot) * kHidden + col);
        const float4 lo = __ldcg(p), hi = __ldcg(p + 1);
        sum[0] += lo.x, sum[1] += lo.y, sum[2] += lo.z, sum[3] += lo.w;
        sum[4] += hi.x, sum[5] += hi.y, sum[6] += hi.z, sum[7] += hi.w;
      }
    }
  }
  *reinterpret_cast<uint4*>(out_row + col) = make_uint4(pack_bf16x2(sum[0], sum[1]), pack_bf16x2(sum[2], sum[3]),
                                                        pack_bf16x2(sum[4], sum[5]), pack_bf16x2(sum[6], sum[7]));
}

__global__ void __launch_bounds__(128) combine_kernel(CombineArgs a) {
  static_assert(kHidden % kCombineCols == 0 && kCombineCols == 8 * 128, "8 columns per thread");
  sm90::pdl_wait();  // GEMM2's rows
  const int splits = a.splits[1];
  const int rows = a.meta->offsets[kLocalExperts - 1] + a.meta->counts[kLocalExperts - 1];
#pragma unroll 1
  for (int item = blockIdx.x; item < a.T * kCombineChunks; item += gridDim.x) {
    const int t = item / kCombineChunks, col = (item % kCombineChunks) * kCombineCols + 8 * threadIdx.x;
    combine_8(a.ypart, a.part2, splits, rows, a.slot_of + t * kMaxLocalPerToken, __popc(a.mask[t]),
              a.out + static_cast<size_t>(t) * kHidden, col);
  }
}

}  // namespace fused_moe

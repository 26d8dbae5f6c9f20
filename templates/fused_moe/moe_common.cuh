// Small device helpers shared by the fused-MoE routing, permutation and combine kernels (the tensor-core pipeline
// has its own, in templates/common/sm90_ptx.cuh).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include "moe_api.h"

namespace fused_moe {

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Inclusive prefix sum over the 32 lanes of a warp (per-expert counts).
__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int other = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += other;
  }
  return v;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace fused_moe

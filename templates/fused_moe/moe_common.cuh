// Shapes, workspace layout and PTX helpers shared by the fused-MoE kernels (sm_90a; mma.sync needs sm_89+).
//
// Numerics in one place:
//  * GEMM1 is FP8 x FP8 on tensor cores (mma.m16n8k32 e4m3); each 128-wide K block's partial sum is promoted to
//    fp32 and multiplied by scale_x(token, kb) * scale_w(nb, kb) there, because the scales change every 128 of K.
//  * The SwiGLU output is kept as bf16 (not re-quantised to fp8: that would add ~2-3 % relative error), stored
//    multiplied by 2^64 so that GEMM2 products stay far from fp32 denormals (see below).
//  * GEMM2 runs in bf16 (mma.m16n8k16): W2 bytes are widened e4m3 -> bf16 with two integer ops by moving the
//    4-bit exponent into bf16's 8-bit field unchanged, which yields exactly value * 2^-120 for normal AND
//    subnormal e4m3. The 2^-120 and the 2^64 are undone by one factor 2^56 folded into the per-block weight scale.
//  * The intermediate's columns are stored permuted inside each 16-column group (inter_true_col) so that a plain
//    ldmatrix of the bf16 intermediate lines up with the k order of the widened fp8 fragments.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include "moe_api.h"

namespace fused_moe {

constexpr float kInterStoreScale = 18446744073709551616.0f;  // 2^64, applied when storing the bf16 intermediate
constexpr float kGemm2Unscale = 72057594037927936.0f;        // 2^56 = 2^120 (widening) / 2^64 (storage)

// True intermediate column (0..15) held at stored position p (0..15) of its 16-column group: stored 2t+u holds
// true 4t+u and stored 8+2t+u holds true 4t+2+u (t = 0..3, u = 0..1). With this order, ldmatrix of the bf16
// intermediate gives thread t the k pairs {4t,4t+1} and {4t+2,4t+3}, which is what widening its fp8 W2 bytes
// 4t..4t+3 gives (lo, hi).
__host__ __device__ constexpr int inter_true_col(int p) { return (p & 7) / 2 * 4 + (p >> 3) * 2 + (p & 1); }

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Inclusive prefix sum over the 32 lanes of a warp (per-expert counts, tiles, units).
__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int other = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += other;
  }
  return v;
}

// Zeroes a register array of accumulators.
template <int A, int B>
__device__ __forceinline__ void zero(float (&x)[A][B]) {
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int b = 0; b < B; ++b) x[a][b] = 0.0f;
}
template <int A, int B, int C>
__device__ __forceinline__ void zero(float (&x)[A][B][C]) {
#pragma unroll
  for (int a = 0; a < A; ++a) zero(x[a]);
}

// ---- shared-memory addressing -----------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows hold CHUNKS chunks (CHUNKS >= 8): the low
// three chunk bits are XORed with the row so that 8 rows read at the same logical chunk hit 8 distinct bank groups.
template <int CHUNKS>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  static_assert(CHUNKS >= 8 && CHUNKS % 8 == 0, "swizzle needs rows of at least 128 bytes");
  return static_cast<uint32_t>((row * CHUNKS + (chunk ^ (row & 7))) * 16);
}

// ---- cp.async -----------------------------------------------------------------------------------------------

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  // src-size 0 writes 16 zero bytes and reads nothing (tails of token lists).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ---- ldmatrix / mma -----------------------------------------------------------------------------------------

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}

// D(16x8, f32) += A(16x32 e4m3, row) * B(32x8 e4m3, col).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D(16x8, f32) += A(16x16 bf16, row) * B(16x8 bf16, col).
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four e4m3 bytes [b0 b1 b2 b3] -> bf16x2 {b0,b1} (lo) and {b2,b3} (hi), each exactly value * 2^-120.
__device__ __forceinline__ void widen_e4m3x4(uint32_t r, uint32_t& lo, uint32_t& hi) {
  const uint32_t x0 = __byte_perm(r, 0u, 0x1404);  // bytes [0, b0, 0, b1]
  const uint32_t x1 = __byte_perm(r, 0u, 0x3424);  // bytes [0, b2, 0, b3]
  lo = (x0 & 0x80008000u) | ((x0 >> 4) & 0x07F007F0u);
  hi = (x1 & 0x80008000u) | ((x1 >> 4) & 0x07F007F0u);
}

__device__ __forceinline__ float silu_times(float gate, float up) {
  // Same expression as the reference: x2 / (1 + exp(-x2)) * x1.
  return gate / (1.0f + expf(-gate)) * up;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace fused_moe

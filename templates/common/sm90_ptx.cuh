// Hopper (sm_90a) PTX helpers shared by the hand-written kernels: one signature each, header-only.
//
// What is here, and the one rule each piece needs:
//  * cp.async (16 B, zero-fill) and ldmatrix: the Ampere-style path (mma.sync kernels, gathers TMA cannot do).
//  * mbarrier: init / arrive / arrive.expect_tx / try_wait.parity. A barrier's phase flips when its pending
//    arrivals reach zero AND its transaction count (bytes announced by expect_tx, retired by TMA) is zero.
//    Waiting on parity P returns once the phase with parity P has completed; a freshly initialised barrier is in
//    phase 0, so a producer waiting on "empty" with parity 1 passes at once (the ring starts empty).
//  * TMA: 2D tile loads through a CUtensorMap passed as a __grid_constant__ kernel parameter, plain bulk copies,
//    2D tile stores; all complete on an mbarrier (loads) or a bulk group (stores). TMA is the async proxy: plain
//    st.shared data read by TMA/wgmma needs fence_proxy_async() first.
//  * wgmma: 64-bit shared-memory matrix descriptors (K-major, 128-byte swizzle, the layout a TMA box of
//    128-byte rows with CU_TENSOR_MAP_SWIZZLE_128B writes), fence / commit_group / wait_group, and
//    m64nNk32 e4m3 x e4m3 -> f32 for N in {16, 32, 64, 128, 256}.
//  * setmaxnreg (producer/consumer register split), griddepcontrol (programmatic dependent launch), named
//    barriers, fp8x2 pack / unpack.
//  * Host: per-device sm_count() and opt_in_smem<kernel>(), launch() / launch_pdl() (programmatic dependent
//    launch), encode_tma_2d() (cuTensorMapEncodeTiled reached through the runtime's driver entry point, no -lcuda).
#pragma once

#include <cstdint>

#include <cuda.h>  // CUtensorMap and its enums (types only; the driver function is looked up at run time)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace sm90 {

// ---- addresses ------------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- cp.async (per thread, generic proxy) -----------------------------------------------------------------------

// 16 bytes global -> shared; when !valid, writes 16 zero bytes and reads nothing (src may then be any address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Arrives on `bar` once all of this thread's earlier cp.async copies have landed. .noinc: the arrival counts
// against the barrier's expected count (so init the barrier with one arrival per thread that does this).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// ---- ldmatrix ---------------------------------------------------------------------------------------------------

// Four 8x8 b16 matrices; lane l supplies the row address of row l%8 of matrix l/8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// ---- mbarrier ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes mbarrier.init visible to the async proxy (TMA completes on the barrier) and to the other threads once
// followed by a CTA barrier (__syncthreads).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival plus `bytes` expected from async copies (TMA / bulk) completing on this barrier in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// True once the phase with parity `parity` has completed (acquire: data it guarded is then visible).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Spins until the phase has completed. Debug aid for first runs: built with -DSM90_WAIT_LIMIT=<polls> (e.g. 1 << 24,
// i.e. well over 0.1 s), a wait that never completes traps (a launch error) instead of hanging the GPU.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#ifdef SM90_WAIT_LIMIT
  for (long long polls = 0; !mbar_try_wait(bar, parity); ++polls)
    if (polls == (SM90_WAIT_LIMIT)) __trap();
#else
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}

// ---- TMA and bulk copies (async proxy) -------------------------------------------------------------------------

// Pulls a tensor map (a __grid_constant__ parameter) into the descriptor cache before its first use.
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Box at element coordinates (c0 = innermost, c1 = row) -> shared `dst` (1024-byte aligned for 128 B swizzle),
// completing `bar` with the box's byte count (out-of-bounds elements are zero-filled and still counted).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// Contiguous global -> shared copy of `bytes` (multiple of 16, both addresses 16-byte aligned), completing `bar`.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// Shared `src` -> box at (c0, c1); out-of-bounds parts are not written. Commit, then wait before reusing `src`.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N committed store groups still read their shared source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (TMA store, wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- wgmma ------------------------------------------------------------------------------------------------------

// Shared-memory matrix descriptor of a K-major operand tile stored as rows of 128 bytes (128 fp8 of K), 8-row
// groups 1024 bytes apart, 16-byte chunks XOR-swizzled by (row % 8): exactly what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B and a 128-byte inner box. Fields: start address >> 4 (bits 0-13), leading byte
// offset >> 4 (16-29; unused for swizzled K-major, set to 1), stride byte offset >> 4 (32-45: 1024 B between
// 8-row groups), base offset (49-51: 0, tiles are 1024-byte aligned), layout (62-63: 1 = 128 B swizzle).
// The k-th 32-wide K slice of the tile is `desc + 2 * k` (start address + 32 bytes): the hardware applies the
// swizzle to the final address, so advancing inside a 128-byte row needs no other change.
__device__ __forceinline__ uint64_t desc_k_sw128(uint32_t smem_addr) {
  const uint64_t start = (smem_addr & 0x3FFFFu) >> 4;
  return start | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// Orders earlier register / shared-memory writes before the following wgmma reads them (once per batch).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Accumulators are registers that wgmma writes asynchronously: an empty volatile asm that "modifies" each of them,
// placed after wgmma_wait (and before wgmma_fence), stops the compiler from moving their reads or writes across.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64 x N, f32, registers) (+)= A(64 x 32, e4m3, smem desc) * B(N x 32, e4m3, smem desc)^T, both K-major.
// `accumulate` = 0 overwrites D (the first K slice of a fresh partial sum). Accumulator layout (per warpgroup):
// warp w holds rows 16w..16w+15; lane l holds rows 16w + l/4 (d[4i], d[4i+1]) and 16w + l/4 + 8 (d[4i+2],
// d[4i+3]) at columns 8i + 2(l%4) + {0, 1}, for i = 0 .. N/8-1.
template <int N>
struct WgmmaFp8;

#define SM90_ACC8(i)                                                                                    \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])

template <>
struct WgmmaFp8<16> {
  static __device__ __forceinline__ void mma(float (&d)[8], uint64_t a, uint64_t b, uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, %8, %9, p, 1, 1;\n}\n"
        : SM90_ACC8(0)
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <>
struct WgmmaFp8<32> {
  static __device__ __forceinline__ void mma(float (&d)[16], uint64_t a, uint64_t b, uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, %16, %17, p, 1, 1;\n}\n"
        : SM90_ACC8(0), SM90_ACC8(8)
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <>
struct WgmmaFp8<64> {
  static __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b, uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24)
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <>
struct WgmmaFp8<128> {
  static __device__ __forceinline__ void mma(float (&d)[64], uint64_t a, uint64_t b, uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1;\n}\n"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24),
          SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56)
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <>
struct WgmmaFp8<256> {
  static __device__ __forceinline__ void mma(float (&d)[128], uint64_t a, uint64_t b, uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1;\n}\n"
        : SM90_ACC8(0), SM90_ACC8(8), SM90_ACC8(16), SM90_ACC8(24),
          SM90_ACC8(32), SM90_ACC8(40), SM90_ACC8(48), SM90_ACC8(56),
          SM90_ACC8(64), SM90_ACC8(72), SM90_ACC8(80), SM90_ACC8(88),
          SM90_ACC8(96), SM90_ACC8(104), SM90_ACC8(112), SM90_ACC8(120)
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

#undef SM90_ACC8

template <int N>
__device__ __forceinline__ void wgmma_fp8(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) {
  WgmmaFp8<N>::mma(d, a, b, accumulate ? 1u : 0u);
}

// ---- cluster barriers ------------------------------------------------------------------------------------------

// Split cluster barrier: every thread of every CTA in the cluster arrives, then waits. Release / acquire make the
// shared-memory writes before an arrive visible to every thread of the cluster after its wait.
__device__ __forceinline__ void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_acquire() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }

// ---- registers, launches, barriers, conversions ---------------------------------------------------------------

// Warpgroup-wide register budget changes (all 128 threads of the warpgroup execute them): producers give
// registers back, consumers take them. R is a multiple of 8 in [24, 256].
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// Programmatic dependent launch: wait until the preceding grid's memory is visible (a no-op when the kernel was
// not launched with the programmatic-serialization attribute); let the next grid start its prologue.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Two floats -> two e4m3 bytes (lo in the low byte), round to nearest even, saturating to +-448 (NaN stays NaN).
__device__ __forceinline__ uint16_t pack_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two e4m3 bytes (lo in the low byte) -> two floats, exactly.
__device__ __forceinline__ float2 unpack_e4m3x2(uint16_t v) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(v));
  const __half2 h = *reinterpret_cast<const __half2*>(&h2);
  return __half22float2(h);
}

// ---- host: per-device state ------------------------------------------------------------------------------------

// Device properties and function attributes belong to one device: they are cached per device ordinal (a process
// may drive several GPUs, one per thread), never once per process.
constexpr int kMaxDevices = 64;

inline int current_device() {
  int device = 0;
  cudaGetDevice(&device);
  return device;
}

// The current device's SM count (persistent grids).
inline int sm_count() {
  static int count[kMaxDevices] = {};
  const int d = current_device();
  int n = d < kMaxDevices ? count[d] : 0;
  if (n == 0) {
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d);
    if (d < kMaxDevices) count[d] = n;
  }
  return n;
}

// Lets `Kernel` use `bytes` of dynamic shared memory on the current device (and, with `non_portable_cluster`,
// clusters above 8 CTAs); set once per device and kernel (the table is per template argument, i.e. per kernel).
template <auto Kernel>
inline cudaError_t opt_in_smem(int bytes, bool non_portable_cluster = false) {
  static int granted[kMaxDevices] = {};
  const int d = current_device();
  if (d < kMaxDevices && granted[d] == bytes) return cudaSuccess;
  cudaError_t err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && non_portable_cluster)
    err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err == cudaSuccess && d < kMaxDevices) granted[d] = bytes;
  return err;
}

// ---- host: launches -------------------------------------------------------------------------------------------

// Launches `kernel`; with `pdl`, programmatic dependent launch is allowed: it may be scheduled while the kernel
// before it in the stream is still running (hiding the launch gap), so it must call pdl_wait() before it reads what
// that kernel writes or writes what it reads. The first kernel of a call is launched plainly (launch): it orders
// the call after the previous one. Returns this launch's own error (not one left pending by earlier work).
template <typename... Params, typename... Args>
inline cudaError_t launch_ex(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

template <typename... Params, typename... Args>
inline cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                              Args... args) {
  return launch_ex(true, kernel, grid, block, smem, stream, args...);
}

template <typename... Params, typename... Args>
inline cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args... args) {
  return launch_ex(false, kernel, grid, block, smem, stream, args...);
}

// ---- host: tensor maps ----------------------------------------------------------------------------------------

// 2D tensor map over a row-major [rows][cols] array (row pitch `row_bytes`, a multiple of 16; base 16-byte
// aligned), box [box_rows][box_cols]; with CU_TENSOR_MAP_SWIZZLE_128B the box's row must be 128 bytes (or less).
// Returns false if the driver rejects it. The driver function is fetched once through the runtime.
inline bool encode_tma_2d(CUtensorMap* map, CUtensorMapDataType dtype, const void* base, uint64_t cols,
                          uint64_t rows, uint64_t row_bytes, uint32_t box_cols, uint32_t box_rows,
                          CUtensorMapSwizzle swizzle) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return static_cast<Encode>(nullptr);
    return reinterpret_cast<Encode>(fn);
  }();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, dtype, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace sm90

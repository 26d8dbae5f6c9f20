// Hopper (sm_90a) helpers for epilogue stores: accumulator fragments laid out as rows in shared memory, so that
// global stores move whole lines. Kept apart from sm90_ptx.cuh while the committed gate evidence of the DSA
// solutions pins that file's bytes (their rendered copies would change); merge it there when they are re-gated.
#pragma once

#include <cstdint>

namespace sm90 {

// Four 8x8 b16 matrices from an mma accumulator fragment: lane l's r[k] holds row l/4, columns 2 (l%4) and +1 of
// matrix k; lane 8k + j gives the shared-memory address (16-byte aligned) of matrix k's row j.
__device__ __forceinline__ void stmatrix_x4(const uint32_t (&r)[4], uint32_t addr) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

}  // namespace sm90

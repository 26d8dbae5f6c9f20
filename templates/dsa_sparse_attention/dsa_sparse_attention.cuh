// DeepSeek-V3.2 sparse MLA attention for decode (16 heads, 2048 selected rows of a paged bf16 cache), sm_90a.
//
// Split-K flash decoding, in two kernels (MERGE = 0) or one (MERGE = 1):
//   1. split kernel, one CTA per (token, split): gathers its share of the token's selected rows (512 compressed-KV
//      dims + 64 RoPE dims = 1152 B each) with cp.async into padded shared memory, runs QK^T and PV with
//      mma.sync m16n8k16 (the 16 heads are exactly the MMA's M, so nothing is padded), keeps the output in
//      registers and an online base-2 softmax, and writes a normalised partial output plus its log-sum-exp;
//   2. merge kernel, one warp group per (token, head, 128 value dims): weights the partials by their lse and
//      writes the bf16 output and the fp32 base-2 lse. It is launched with programmatic dependent launch, so its
//      launch overlaps the split kernel's tail.
// With MERGE = 1 the split kernel is launched cooperatively (all CTAs co-resident: at most one per SM, which
// choose_splits guarantees), waits at a grid-wide barrier after writing its partial, and then merges its own
// 1/splits of the token's output: one launch, no kernel boundary and no second dependent lse -> partial chain.
// The barrier is cooperative_groups' grid sync, whose counter lives in driver-managed per-launch memory: no
// workspace of ours carries state from one call to the next. With one split per token (many tokens) nothing
// needs merging: the kernel writes the output directly and is launched normally (no barrier).
// Split s of a token takes positions s, s + S, s + 2S, ... of the 2048 (padding, usually at the tail, spreads
// evenly), drops -1 / out-of-range entries by compacting its list, and only loads and scores valid rows.
//
// Tunables (template parameters): BLOCK_N rows per pipeline stage, STAGES stages, NUM_WARPS warps per CTA,
// MAX_SPLITS splits per token at most (fewer when tokens alone fill the GPU), PDL programmatic launch on/off,
// MERGE (above), QK_CHAINS independent accumulator chains per QK tile (2 halves the dependent MMA chain).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa_sparse_attention_api.h"
#include "sm90_ptx.cuh"

namespace dsa_attn {

constexpr int kHeads = 16;
constexpr int kDimCkv = 512;
constexpr int kDimKpe = 64;
constexpr int kDimQk = kDimCkv + kDimKpe;   // 576
constexpr int kTopK = 2048;
constexpr int kChunksCkv = kDimCkv / 8;     // 16-byte chunks per compressed-KV row
constexpr int kChunksQk = kDimQk / 8;       // 72
// Shared-memory rows are 576 bf16 + 16 B of padding: a 1168 B stride (73 chunks, odd) puts the 8 rows of every
// ldmatrix 8x8 block on distinct bank groups, without a swizzle.
constexpr int kRowStride = kDimQk + 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

// Geometry of one tile of BLOCK_N gathered rows over NUM_WARPS warps (shared by both kernels).
template <int BLOCK_N, int NUM_WARPS>
struct TileConfig {
    static constexpr int kBlockN = BLOCK_N;
    static constexpr int kThreads = NUM_WARPS * 32;
    static constexpr int kRowsPerWarp = BLOCK_N / NUM_WARPS;   // QK: each warp scores its own rows of the tile
    static constexpr int kQkTiles = kRowsPerWarp / 8;          // n8 tiles per warp in QK
    static constexpr int kDimsPerWarp = kDimCkv / NUM_WARPS;   // PV: each warp owns a slice of the value dims
    static constexpr int kPvTiles = kDimsPerWarp / 8;          // n8 tiles (fp32 accumulators) per warp
    static constexpr int kPStride = BLOCK_N + 8;               // probabilities [16][BLOCK_N] bf16, padded
    static_assert(kRowsPerWarp % 8 == 0 && kQkTiles >= 1 && kQkTiles <= 2,
                  "BLOCK_N / NUM_WARPS must be 8 or 16 rows per warp");
    static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 64, "BLOCK_N must be a multiple of the MMA K (16), at most 64");
    static_assert(kPvTiles % 2 == 0, "value dims per warp must be a multiple of 16");
};

template <int BLOCK_N, int STAGES, int NUM_WARPS>
struct SplitConfig : TileConfig<BLOCK_N, NUM_WARPS> {
    using Tile = TileConfig<BLOCK_N, NUM_WARPS>;
    static_assert(STAGES >= 2, "the pipeline needs two stages at least");

    static constexpr int kQOffset = 0;
    static constexpr int kKvOffset = kQOffset + kHeads * kRowStride * 2;
    static constexpr int kStageBytes = BLOCK_N * kRowStride * 2;
    static constexpr int kPOffset = kKvOffset + STAGES * kStageBytes;
    static constexpr int kMaxOffset = kPOffset + kHeads * Tile::kPStride * 2;   // per-warp row maxima [NUM_WARPS][16]
    static constexpr int kSumOffset = kMaxOffset + NUM_WARPS * kHeads * 4; // per-warp row sums [NUM_WARPS][16]
    static constexpr int kCountOffset = kSumOffset + NUM_WARPS * kHeads * 4;
    static constexpr int kIdxOffset = kCountOffset + ((NUM_WARPS * 4 + 15) / 16) * 16;
    static constexpr int kMaxRows = (kTopK + BLOCK_N - 1) / BLOCK_N * BLOCK_N;   // one split per token
    static constexpr int kMaxSmemBytes = kIdxOffset + kMaxRows * 4;
    static_assert(kMaxSmemBytes <= 227 * 1024, "BLOCK_N * STAGES too large for 227 KB of shared memory");

    // Rows a split may own (positions split, split + S, ...), rounded up to whole tiles.
    __host__ __device__ static constexpr int rows_per_split(int splits) {
        return ((kTopK + splits - 1) / splits + BLOCK_N - 1) / BLOCK_N * BLOCK_N;
    }
    static constexpr int smem_bytes(int splits) { return kIdxOffset + rows_per_split(splits) * 4; }
};

// ---- PTX wrappers ------------------------------------------------------------------------------------------------

using sm90::cp_async_16;  // the shared PTX helpers (templates/common/sm90_ptx.cuh)
using sm90::cp_async_commit;
using sm90::cp_async_wait;
using sm90::cp_async_wait_all;
using sm90::ldmatrix_x2;
using sm90::ldmatrix_x4;
using sm90::ldmatrix_x4_trans;
using sm90::smem_u32;
using sm90::bulk_load;
using sm90::cluster_arrive_release;
using sm90::cluster_wait_acquire;
using sm90::mbar_arrive;
using sm90::mbar_arrive_expect_tx;
using sm90::mbar_fence_init;
using sm90::mbar_init;
using sm90::mbar_wait;

// D += A (16x16 bf16, row) * B (16x8 bf16, col), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x; ex2.approx maps -inf to +0, which the masking relies on.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// Programmatic dependent launch: let the dependent grid start launching / wait for the primary grid's results.
__device__ __forceinline__ void pdl_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait_primary() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// ---- tile math (both kernels) ------------------------------------------------------------------------------------

// Per-lane ldmatrix addresses (bytes). QK: A = query rows (heads), B = this warp's key rows of a tile. PV: A =
// probabilities [16][BLOCK_N], B = value rows (tile rows = k) x this warp's dims (= n), transposed.
template <class Cfg>
struct LaneAddrs {
    uint32_t q, key_off, p, val_off;
    __device__ __forceinline__ LaneAddrs(const __nv_bfloat16* sQ, const __nv_bfloat16* sP) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        q = smem_u32(sQ + (lane % 16) * kRowStride + (lane / 16) * 8);
        const int key_row =
            Cfg::kQkTiles == 2 ? warp * 16 + (lane & 7) + ((lane >> 4) << 3) : warp * 8 + (lane & 7);
        key_off = (key_row * kRowStride + ((lane >> 3) & 1) * 8) * 2;
        p = smem_u32(sP + (lane % 16) * Cfg::kPStride + (lane / 16) * 8);
        val_off = (((lane & 7) + ((lane >> 3) & 1) * 8) * kRowStride + warp * Cfg::kDimsPerWarp + (lane >> 4) * 8) * 2;
    }
};

// A thread's share of the online softmax: output accumulators of its value dims for heads group / group + 8
// (MMA fragment rows), the running max of scaled (base-2) logits and its share of the running sum of 2^(logit - max).
template <class Cfg>
struct SoftmaxState {
    float acc_o[Cfg::kPvTiles][4];
    float row_max[2] = {kNegInf, kNegInf};
    float row_sum[2] = {0.f, 0.f};
    __device__ __forceinline__ SoftmaxState() {
#pragma unroll
        for (int t = 0; t < Cfg::kPvTiles; ++t) acc_o[t][0] = acc_o[t][1] = acc_o[t][2] = acc_o[t][3] = 0.f;
    }
    // After the last tile: the full row sums (the quad's lanes, then the warps: each warp summed different rows of
    // the tiles) through sSum [NUM_WARPS][16], then per fragment row 1 / sum and the base-2 lse (0 and -inf for a
    // row without any valid key). Contains a __syncthreads.
    __device__ __forceinline__ void finish(float* sSum, float (&inv)[2], float (&lse)[2]) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
            row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
        }
        if (quad == 0) {
            sSum[warp * kHeads + group] = row_sum[0];
            sSum[warp * kHeads + group + 8] = row_sum[1];
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float total = 0.f;
#pragma unroll
            for (int w = 0; w < Cfg::kThreads / 32; ++w) total += sSum[w * kHeads + group + r * 8];
            inv[r] = total > 0.f ? 1.f / total : 0.f;
            lse[r] = total > 0.f ? row_max[r] + log2f(total) : kNegInf;
        }
    }
};

// One tile of BLOCK_N gathered rows at `stage` (bit r of `valid` set: row r holds a key; rows without it must be
// finite, e.g. zero-filled, as their probability 0 still multiplies them in PV): S = Q K^T scaled to base 2 (36
// k-steps over the 576 dims; a warp whose rows are all invalid skips them), the online-softmax update, then
// O += P V over the 16-row steps that hold a valid row. Two __syncthreads (the tile's row maxima across warps, the
// probabilities in sP); a caller that reuses `stage` afterwards needs one more.
template <class Cfg, int QK_CHAINS>
__device__ __forceinline__ void attend_tile(const LaneAddrs<Cfg>& addr, uint32_t stage, uint64_t valid,
                                            float scale_log2, __nv_bfloat16* sP, float* sMax,
                                            SoftmaxState<Cfg>& st) {
    static_assert(QK_CHAINS == 1 || QK_CHAINS == 2, "QK_CHAINS must be 1 or 2");
    constexpr int kWarps = Cfg::kThreads / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
    const uint64_t warp_rows = (1ull << Cfg::kRowsPerWarp) - 1ull;
    const bool warp_has_rows = ((valid >> (warp * Cfg::kRowsPerWarp)) & warp_rows) != 0;
    // With QK_CHAINS = 2, odd k-steps accumulate separately: two dependent MMA chains of 18 instead of one of 36.
    float acc_s[Cfg::kQkTiles][4], acc_odd[Cfg::kQkTiles][4];
#pragma unroll
    for (int j = 0; j < Cfg::kQkTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[j][e] = acc_odd[j][e] = 0.f;
    }
    if (warp_has_rows) {
#pragma unroll
        for (int ks = 0; ks < kDimQk / 16; ++ks) {
            float (&acc)[Cfg::kQkTiles][4] = (QK_CHAINS == 2 && (ks & 1)) ? acc_odd : acc_s;
            uint32_t a[4];
            ldmatrix_x4(a, addr.q + ks * 32);
            if constexpr (Cfg::kQkTiles == 2) {
                uint32_t b[4];
                ldmatrix_x4(b, stage + addr.key_off + ks * 32);
                mma_bf16(acc[0], a, b[0], b[1]);
                mma_bf16(acc[1], a, b[2], b[3]);
            } else {
                uint32_t b[2];
                ldmatrix_x2(b, stage + addr.key_off + ks * 32);
                mma_bf16(acc[0], a, b[0], b[1]);
            }
        }
        if constexpr (QK_CHAINS == 2) {
#pragma unroll
            for (int j = 0; j < Cfg::kQkTiles; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[j][e] += acc_odd[j][e];
            }
        }
    }

    // Scale to base 2, mask invalid rows, and find the tile's row maxima across warps.
    float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < Cfg::kQkTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = warp * Cfg::kRowsPerWarp + j * 8 + quad * 2 + (e & 1);
            const float v = (valid >> col) & 1ull ? acc_s[j][e] * scale_log2 : kNegInf;
            acc_s[j][e] = v;
            tile_max[e >> 1] = fmaxf(tile_max[e >> 1], v);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    }
    if (quad == 0) {
        sMax[warp * kHeads + group] = tile_max[0];
        sMax[warp * kHeads + group + 8] = tile_max[1];
    }
    __syncthreads();

    // Online softmax: every warp derives the same new max per row, so their rescalings agree.
    float offset[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float m = st.row_max[r];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sMax[w * kHeads + group + r * 8]);
        offset[r] = m == kNegInf ? 0.f : m;             // a row with nothing valid yet keeps p = 0, no NaN
        alpha[r] = fast_exp2(st.row_max[r] - offset[r]);  // 0 on the first valid tile (row_max = -inf)
        st.row_max[r] = m;
        st.row_sum[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < Cfg::kQkTiles; ++j) {
        const float p0 = fast_exp2(acc_s[j][0] - offset[0]), p1 = fast_exp2(acc_s[j][1] - offset[0]);
        const float p2 = fast_exp2(acc_s[j][2] - offset[1]), p3 = fast_exp2(acc_s[j][3] - offset[1]);
        st.row_sum[0] += p0 + p1;
        st.row_sum[1] += p2 + p3;
        const int col = warp * Cfg::kRowsPerWarp + j * 8 + quad * 2;
        *reinterpret_cast<uint32_t*>(sP + group * Cfg::kPStride + col) = pack_bf16x2(p0, p1);
        *reinterpret_cast<uint32_t*>(sP + (group + 8) * Cfg::kPStride + col) = pack_bf16x2(p2, p3);
    }
#pragma unroll
    for (int t = 0; t < Cfg::kPvTiles; ++t) {
        st.acc_o[t][0] *= alpha[0];
        st.acc_o[t][1] *= alpha[0];
        st.acc_o[t][2] *= alpha[1];
        st.acc_o[t][3] *= alpha[1];
    }
    __syncthreads();  // all probabilities of the tile are in sP

    // O += P V, 16 rows at a time (steps without a valid row skipped), for this warp's value dims.
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
        if (((valid >> (kk * 16)) & 0xffffull) == 0) continue;
        uint32_t a[4];
        ldmatrix_x4(a, addr.p + kk * 32);
#pragma unroll
        for (int t = 0; t < Cfg::kPvTiles; t += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, stage + addr.val_off + kk * 16 * kRowStride * 2 + t * 16);
            mma_bf16(st.acc_o[t], a, b[0], b[1]);
            mma_bf16(st.acc_o[t + 1], a, b[2], b[3]);
        }
    }
}

// ---- split kernel pieces -----------------------------------------------------------------------------------------

// Gathers this split's valid row ids into sIdx (in position order) and returns how many there are. One pass per
// CTA-width of positions; warp ballots give each valid entry its slot, so the order is deterministic.
template <int NUM_WARPS>
__device__ __forceinline__ int compact_indices(const int32_t* __restrict__ row_indices, int split, int splits,
                                               int64_t total_rows, int* sIdx, int* sWarpCount) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int positions = (kTopK - split + splits - 1) / splits;
    int count = 0;
    for (int base = 0; base < positions; base += NUM_WARPS * 32) {
        const int j = base + tid;
        int row = -1;
        if (j < positions) {
            const int v = __ldg(row_indices + split + j * splits);
            row = (v >= 0 && v < total_rows) ? v : -1;
        }
        const unsigned ballot = __ballot_sync(0xffffffffu, row >= 0);
        if (lane == 0) sWarpCount[warp] = __popc(ballot);
        __syncthreads();
        int before = count, total = 0;
#pragma unroll
        for (int w = 0; w < NUM_WARPS; ++w) {
            const int c = sWarpCount[w];
            before += (w < warp) ? c : 0;
            total += c;
        }
        if (row >= 0) sIdx[before + __popc(ballot & ((1u << lane) - 1u))] = row;
        count += total;
        __syncthreads();  // sWarpCount is rewritten next pass; sIdx is read by every warp afterwards
    }
    return count;
}

// The 16 query heads of one token (512 + 64 dims per head) into padded shared rows.
template <int THREADS>
__device__ __forceinline__ void load_query(const __nv_bfloat16* __restrict__ q_nope,
                                           const __nv_bfloat16* __restrict__ q_pe, int token, __nv_bfloat16* sQ) {
    for (int c = threadIdx.x; c < kHeads * kChunksQk; c += THREADS) {
        const int head = c / kChunksQk, chunk = c % kChunksQk;
        const size_t row = static_cast<size_t>(token) * kHeads + head;
        const __nv_bfloat16* src = chunk < kChunksCkv ? q_nope + row * kDimCkv + chunk * 8
                                                      : q_pe + row * kDimKpe + (chunk - kChunksCkv) * 8;
        cp_async_16(smem_u32(sQ + head * kRowStride + chunk * 8), src, true);
    }
}

// Rows [first, first + BLOCK_N) of the compacted list into one stage; rows at or past `count` are zero-filled so
// that masked probabilities never meet uninitialised (possibly NaN) shared memory. A warp copies whole rows:
// 32 lanes x 16 B twice for the 1024 B of compressed KV, 8 lanes for the 128 B of RoPE key.
template <int BLOCK_N, int NUM_WARPS>
__device__ __forceinline__ void load_kv_tile(const __nv_bfloat16* __restrict__ ckv,
                                             const __nv_bfloat16* __restrict__ kpe, const int* sIdx, int first,
                                             int count, __nv_bfloat16* sStage) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll 4
    for (int r = warp; r < BLOCK_N; r += NUM_WARPS) {
        const bool valid = first + r < count;
        const int64_t row = valid ? sIdx[first + r] : 0;
        const __nv_bfloat16* src_ckv = ckv + row * kDimCkv;
        const uint32_t dst = smem_u32(sStage + r * kRowStride);
        cp_async_16(dst + lane * 16, src_ckv + lane * 8, valid);
        cp_async_16(dst + (lane + 32) * 16, src_ckv + (lane + 32) * 8, valid);
        if (lane < kDimKpe / 8) cp_async_16(dst + kDimCkv * 2 + lane * 16, kpe + row * kDimKpe + lane * 8, valid);
    }
}

// ---- in-kernel merge (MERGE = 1) ------------------------------------------------------------------------------

constexpr int kOutVecs = kHeads * kDimCkv / 4;   // a token's output as 2048 float4 columns (head-major)
constexpr int kVecsPerHead = kDimCkv / 4;
constexpr int kMergeMaxSplits = 128;
constexpr int kMergeMaxThreads = 256;
// Scratch in the (idle by then) KV stages: partial columns [splits][width] float4, lse / weights [splits][heads],
// per-head 1/total, per-thread partial sums.
constexpr int kMergePartBytes = (kOutVecs + kMergeMaxSplits) * 16;
constexpr int kMergeWeightBytes = 4 * (kOutVecs / kVecsPerHead + 3 * kMergeMaxSplits);
constexpr int kMergeInvBytes = 4 * 32;
constexpr int kMergeSmemBytes = kMergePartBytes + kMergeWeightBytes + kMergeInvBytes + kMergeMaxThreads * 16;
static_assert(kMergeWeightBytes % 16 == 0, "keeps the partial-sum scratch 16-byte aligned");

// CTA `split` of `token` merges output columns [split * 2048 / S, (split + 1) * 2048 / S) over the S partials:
// one batch of cp.async for the columns and plain L2 loads for the lse (written by other SMs before the grid
// barrier, so both bypass L1), then fixed-order sums (bit-identical across calls).
template <int THREADS>
__device__ __forceinline__ void merge_slice(const DsaAttentionParams& p, int token, int split, uint8_t* scratch) {
    static_assert(THREADS <= kMergeMaxThreads && THREADS % 32 == 0, "merge scratch sized for 256 threads");
    const int splits = p.splits, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int first = split * kOutVecs / splits, width = (split + 1) * kOutVecs / splits - first;
    const int h0 = first / kVecsPerHead, heads = (first + width - 1) / kVecsPerHead - h0 + 1;
    float4* sPart = reinterpret_cast<float4*>(scratch);                              // [splits][width]
    float* sW = reinterpret_cast<float*>(scratch + kMergePartBytes);                 // [splits][heads]
    float* sInv = reinterpret_cast<float*>(scratch + kMergePartBytes + kMergeWeightBytes);   // [heads]
    float4* sRed = reinterpret_cast<float4*>(scratch + kMergePartBytes + kMergeWeightBytes + kMergeInvBytes);

    const float4* part = reinterpret_cast<const float4*>(p.partial_out) + static_cast<size_t>(token) * splits * kOutVecs;
    for (int u = tid; u < splits * width; u += THREADS) {
        const int j = u / width;
        cp_async_16(smem_u32(sPart + u), part + static_cast<size_t>(j) * kOutVecs + first + (u - j * width), true);
    }
    cp_async_commit();
    const float* lse = p.partial_lse + static_cast<size_t>(token) * splits * kHeads + h0;
    for (int u = tid; u < splits * heads; u += THREADS) {
        const int j = u / heads;
        sW[u] = __ldcg(lse + j * kHeads + (u - j * heads));
    }
    __syncthreads();

    // Per head: lse maximum, weights 2^(lse - max) (in place), their total; the slice holding a head's first
    // column writes its final lse.
    for (int hh = warp; hh < heads; hh += THREADS / 32) {
        float mx = kNegInf;
        for (int j = lane; j < splits; j += 32) mx = fmaxf(mx, sW[j * heads + hh]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float offset = mx == kNegInf ? 0.f : mx;   // no valid row at all: every weight is 0
        float total = 0.f;
        for (int j = lane; j < splits; j += 32) {
            const float w = fast_exp2(sW[j * heads + hh] - offset);
            sW[j * heads + hh] = w;
            total += w;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
        if (lane == 0) {
            sInv[hh] = total > 0.f ? 1.f / total : 0.f;
            const int head = h0 + hh;
            if (head * kVecsPerHead >= first)
                p.lse[static_cast<size_t>(token) * kHeads + head] = total > 0.f ? mx + log2f(total) : kNegInf;
        }
    }
    cp_async_wait_all();
    __syncthreads();

    auto* out = reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.output)) +
                static_cast<size_t>(token) * kOutVecs + first;
    auto store = [&](int f, float4 acc) {
        const float inv = sInv[(first + f) / kVecsPerHead - h0];
        out[f] = make_uint2(pack_bf16x2(acc.x * inv, acc.y * inv), pack_bf16x2(acc.z * inv, acc.w * inv));
    };
    auto fold = [&](float4& acc, int j, int f) {
        const float w = sW[j * heads + (first + f) / kVecsPerHead - h0];
        const float4 x = sPart[j * width + f];
        acc.x += w * x.x;
        acc.y += w * x.y;
        acc.z += w * x.z;
        acc.w += w * x.w;
    };
    if (width <= THREADS) {   // `groups` threads per column fold every groups-th split, then one thread adds them
        const int groups = THREADS / width, g = tid / width, f = tid - g * width;
        if (g < groups) {
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int j = g; j < splits; j += groups) fold(acc, j, f);
            sRed[tid] = acc;
        }
        __syncthreads();
        if (tid < width) {
            float4 acc = sRed[tid];
            for (int k = 1; k < groups; ++k) {
                const float4 x = sRed[k * width + tid];
                acc.x += x.x;
                acc.y += x.y;
                acc.z += x.z;
                acc.w += x.w;
            }
            store(tid, acc);
        }
    } else {                  // few splits, wide slices: one thread per column
        for (int f = tid; f < width; f += THREADS) {
            float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int j = 0; j < splits; ++j) fold(acc, j, f);
            store(f, acc);
        }
    }
}

// One CTA per (token, split). Grid: tokens * splits CTAs, NUM_WARPS * 32 threads, Cfg::smem_bytes(splits) bytes.
// FUSED: merge in this kernel (a cooperative launch when splits > 1), see merge_slice.
template <int BLOCK_N, int STAGES, int NUM_WARPS, bool FUSED, int QK_CHAINS>
__global__ void __launch_bounds__(NUM_WARPS * 32, 1) dsa_attention_split_kernel(const DsaAttentionParams p) {
    using Cfg = SplitConfig<BLOCK_N, STAGES, NUM_WARPS>;
    static_assert(QK_CHAINS == 1 || QK_CHAINS == 2, "QK_CHAINS must be 1 or 2");
    static_assert(!FUSED || STAGES * Cfg::kStageBytes >= kMergeSmemBytes, "merge scratch must fit the KV stages");
    extern __shared__ __align__(128) uint8_t smem[];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kQOffset);
    __nv_bfloat16* sKv = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kKvOffset);
    __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kPOffset);
    float* sMax = reinterpret_cast<float*>(smem + Cfg::kMaxOffset);
    float* sSum = reinterpret_cast<float*>(smem + Cfg::kSumOffset);
    int* sWarpCount = reinterpret_cast<int*>(smem + Cfg::kCountOffset);
    int* sIdx = reinterpret_cast<int*>(smem + Cfg::kIdxOffset);

    const int splits = p.splits;
    const int token = blockIdx.x / splits, split = blockIdx.x % splits;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = lane / 4, quad = lane % 4;   // MMA fragment coordinates: rows group, group + 8
    const auto* ckv = static_cast<const __nv_bfloat16*>(p.ckv_cache);
    const auto* kpe = static_cast<const __nv_bfloat16*>(p.kpe_cache);

    // Query first (independent of the indices), then the index list; the query joins the first tile's group.
    load_query<Cfg::kThreads>(static_cast<const __nv_bfloat16*>(p.q_nope),
                              static_cast<const __nv_bfloat16*>(p.q_pe), token, sQ);
    const int count = compact_indices<NUM_WARPS>(p.indices + static_cast<size_t>(token) * kTopK, split, splits,
                                                 p.total_rows, sIdx, sWarpCount);
    const int tiles = (count + BLOCK_N - 1) / BLOCK_N;
    // One commit group per stage, empty past the last tile, so the wait counts below hold for any `tiles`.
#pragma unroll
    for (int st = 0; st < STAGES; ++st) {
        if (st < tiles)
            load_kv_tile<BLOCK_N, NUM_WARPS>(ckv, kpe, sIdx, st * BLOCK_N, count, sKv + st * BLOCK_N * kRowStride);
        cp_async_commit();
    }
    if constexpr (!FUSED) pdl_launch_dependents();   // the merge kernel may start launching

    const float scale_log2 = (p.scale_ptr != nullptr ? *p.scale_ptr : p.scale) * kLog2e;

    const LaneAddrs<Cfg> addrs(sQ, sP);
    SoftmaxState<Cfg> state;
    for (int tile = 0; tile < tiles; ++tile) {
        if (tile == 0) cp_async_wait<STAGES - 1>(); else cp_async_wait<STAGES - 2>();
        __syncthreads();  // tile visible to all warps; all warps are done with the previous tile's stage
        if (tile > 0) {
            const int next = tile - 1 + STAGES;
            if (next < tiles)
                load_kv_tile<BLOCK_N, NUM_WARPS>(ckv, kpe, sIdx, next * BLOCK_N, count,
                                                 sKv + ((tile - 1) % STAGES) * BLOCK_N * kRowStride);
            cp_async_commit();
        }
        const int valid = count - tile * BLOCK_N;   // the compacted list: the tile's first `valid` rows
        attend_tile<Cfg, QK_CHAINS>(addrs, smem_u32(sKv + (tile % STAGES) * BLOCK_N * kRowStride),
                                    valid >= 64 ? ~0ull : (1ull << valid) - 1ull, scale_log2, sP, sMax, state);
    }
    cp_async_wait_all();  // only empty groups (or, with no tile, the query) can still be pending
    float inv[2], lse[2];
    state.finish(sSum, inv, lse);
    // With one split per token in the fused kernel, this CTA holds the whole token: it writes the final output and
    // lse (part_row is then the token's lse row) and nothing is merged.
    const bool direct = FUSED && splits == 1;
    const size_t part_row = (static_cast<size_t>(token) * splits + split) * kHeads;
    float* lse_rows = direct ? p.lse : p.partial_lse;
    if (warp == 0 && quad == 0) {
        lse_rows[part_row + group] = lse[0];
        lse_rows[part_row + group + 8] = lse[1];
    }
    if (direct) {
        auto* out0 = static_cast<__nv_bfloat16*>(p.output) + (part_row + group) * kDimCkv +
                     warp * Cfg::kDimsPerWarp + quad * 2;
        auto* out1 = out0 + 8 * kDimCkv;
#pragma unroll
        for (int t = 0; t < Cfg::kPvTiles; ++t) {
            *reinterpret_cast<uint32_t*>(out0 + t * 8) = pack_bf16x2(state.acc_o[t][0] * inv[0], state.acc_o[t][1] * inv[0]);
            *reinterpret_cast<uint32_t*>(out1 + t * 8) = pack_bf16x2(state.acc_o[t][2] * inv[1], state.acc_o[t][3] * inv[1]);
        }
        return;
    }
    float* out0 = p.partial_out + (part_row + group) * kDimCkv + warp * Cfg::kDimsPerWarp + quad * 2;
    float* out1 = out0 + 8 * kDimCkv;
#pragma unroll
    for (int t = 0; t < Cfg::kPvTiles; ++t) {
        *reinterpret_cast<float2*>(out0 + t * 8) = make_float2(state.acc_o[t][0] * inv[0], state.acc_o[t][1] * inv[0]);
        *reinterpret_cast<float2*>(out1 + t * 8) = make_float2(state.acc_o[t][2] * inv[1], state.acc_o[t][3] * inv[1]);
    }
    if constexpr (FUSED) {
        cooperative_groups::this_grid().sync();   // every partial of every token written and visible
        merge_slice<Cfg::kThreads>(p, token, split, smem + Cfg::kKvOffset);
    }
}

// ---- cluster kernel (MERGE = 2) ----------------------------------------------------------------------------------

// One thread-block cluster of 16 CTAs per token (the largest cluster, non-portable): CTA r owns positions r, r + 16,
// ..., i.e. 128 rows, all resident in shared memory at once, so there is no ring to recycle: every row's thread
// issues its two bulk copies (1024 B of compressed KV + 128 B of RoPE key) right after its index arrives, each
// BLOCK_N-row tile completes on its own mbarrier, and the tiles are attended in order as they land. Invalid
// positions (-1 or out of range) are zero-filled rows with their valid bit clear. The CTA's normalised partial
// output (fp32 [16][512]) and lse then stay in its shared memory; after a cluster barrier CTA r merges head r over
// the 16 partials through distributed shared memory and writes it. No workspace, no grid barrier, no second launch.
constexpr int kClusterSplits = 16;
constexpr int kClusterRows = kTopK / kClusterSplits;   // 128

template <int BLOCK_N, int NUM_WARPS>
struct ClusterConfig : TileConfig<BLOCK_N, NUM_WARPS> {
    using Tile = TileConfig<BLOCK_N, NUM_WARPS>;
    static constexpr int kTiles = kClusterRows / BLOCK_N;
    static_assert(kClusterRows % BLOCK_N == 0, "BLOCK_N must divide the 128 rows of a CTA");
    static_assert(Tile::kThreads >= kClusterRows, "one thread per row issues its copies: at least 4 warps");

    static constexpr int kQOffset = 0;
    static constexpr int kKvOffset = kQOffset + kHeads * kRowStride * 2;
    static constexpr int kPOffset = kKvOffset + kClusterRows * kRowStride * 2;
    static constexpr int kMaxOffset = kPOffset + kHeads * Tile::kPStride * 2;
    static constexpr int kSumOffset = kMaxOffset + NUM_WARPS * kHeads * 4;
    static constexpr int kValidOffset = kSumOffset + NUM_WARPS * kHeads * 4;   // a valid-row ballot per 32 rows
    static constexpr int kBarOffset = kValidOffset + kClusterRows / 8;         // query barrier, then one per tile
    static constexpr int kSmemBytes = kBarOffset + 8 * (1 + kTiles);
    static_assert(kValidOffset % 16 == 0 && kBarOffset % 8 == 0, "alignment of the ballots and barriers");
    static_assert(kSmemBytes <= 227 * 1024, "the cluster kernel's rows do not fit 227 KB");
    // After the tiles, the KV rows' space holds the partial output [16][512] fp32 and its lse [16].
    static constexpr int kPartOffset = kKvOffset;
    static constexpr int kPartLseOffset = kPartOffset + kHeads * kDimCkv * 4;
    static_assert(kPartLseOffset + kHeads * 4 <= kPOffset, "the partial must fit the KV rows");
};

// Grid: 16 x tokens CTAs in clusters of 16 (x), NUM_WARPS * 32 threads, ClusterConfig::kSmemBytes bytes.
template <int BLOCK_N, int NUM_WARPS, int QK_CHAINS>
__global__ void __launch_bounds__(NUM_WARPS * 32, 1) dsa_attention_cluster_kernel(const DsaAttentionParams p) {
    using Cfg = ClusterConfig<BLOCK_N, NUM_WARPS>;
    namespace cg = cooperative_groups;
    extern __shared__ __align__(128) uint8_t smem[];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kQOffset);
    __nv_bfloat16* sKv = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kKvOffset);
    __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kPOffset);
    float* sMax = reinterpret_cast<float*>(smem + Cfg::kMaxOffset);
    float* sSum = reinterpret_cast<float*>(smem + Cfg::kSumOffset);
    uint32_t* sValid = reinterpret_cast<uint32_t*>(smem + Cfg::kValidOffset);
    float* sPart = reinterpret_cast<float*>(smem + Cfg::kPartOffset);
    float* sPartLse = reinterpret_cast<float*>(smem + Cfg::kPartLseOffset);
    const uint32_t q_bar = smem_u32(smem + Cfg::kBarOffset);
    auto tile_bar = [&](int tile) { return q_bar + 8u * (1 + tile); };

    const cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank());
    const int token = blockIdx.x / kClusterSplits;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, group = lane / 4, quad = lane % 4;
    const auto* ckv = static_cast<const __nv_bfloat16*>(p.ckv_cache);
    const auto* kpe = static_cast<const __nv_bfloat16*>(p.kpe_cache);

    // This thread's row id first: its round trip overlaps the barrier setup and the query's copies.
    int row = -1;
    if (tid < kClusterRows) {
        const int v = __ldg(p.indices + static_cast<size_t>(token) * kTopK + rank + tid * kClusterSplits);
        row = (v >= 0 && v < p.total_rows) ? v : -1;
    }
    if (tid == 0) {
        mbar_init(q_bar, 1);
        for (int t = 0; t < Cfg::kTiles; ++t) mbar_init(tile_bar(t), BLOCK_N);   // one arrival per row
        mbar_fence_init();
        mbar_arrive_expect_tx(q_bar, kHeads * kDimQk * 2);
        const auto* q_nope = static_cast<const __nv_bfloat16*>(p.q_nope) + static_cast<size_t>(token) * kHeads * kDimCkv;
        const auto* q_pe = static_cast<const __nv_bfloat16*>(p.q_pe) + static_cast<size_t>(token) * kHeads * kDimKpe;
        for (int h = 0; h < kHeads; ++h) {
            const uint32_t dst = smem_u32(sQ + h * kRowStride);
            bulk_load(dst, q_nope + h * kDimCkv, kDimCkv * 2, q_bar);
            bulk_load(dst + kDimCkv * 2, q_pe + h * kDimKpe, kDimKpe * 2, q_bar);
        }
    }
    const float scale_log2 = (p.scale_ptr != nullptr ? *p.scale_ptr : p.scale) * kLog2e;
    __syncthreads();   // the barriers are initialised

    if (tid < kClusterRows) {
        const unsigned ballot = __ballot_sync(0xffffffffu, row >= 0);
        if (lane == 0) sValid[warp] = ballot;   // published by this lane's arrival on its tile's barrier
        const uint32_t bar = tile_bar(tid / BLOCK_N);
        const uint32_t dst = smem_u32(sKv + tid * kRowStride);
        if (row >= 0) {
            mbar_arrive_expect_tx(bar, kDimQk * 2);
            bulk_load(dst, ckv + static_cast<int64_t>(row) * kDimCkv, kDimCkv * 2, bar);
            bulk_load(dst + kDimCkv * 2, kpe + static_cast<int64_t>(row) * kDimKpe, kDimKpe * 2, bar);
        } else {
            uint4* zero = reinterpret_cast<uint4*>(sKv + tid * kRowStride);
            for (int c = 0; c < kChunksQk; ++c) zero[c] = make_uint4(0u, 0u, 0u, 0u);
            mbar_arrive(bar);   // release: the zeros (and the ballot) are visible to the barrier's waiters
        }
    }

    const LaneAddrs<Cfg> addrs(sQ, sP);
    SoftmaxState<Cfg> state;
    mbar_wait(q_bar, 0);
#pragma unroll 1
    for (int tile = 0; tile < Cfg::kTiles; ++tile) {
        mbar_wait(tile_bar(tile), 0);
        const int first = tile * BLOCK_N;
        uint64_t valid = sValid[first / 32];
        if constexpr (BLOCK_N == 64) valid |= static_cast<uint64_t>(sValid[first / 32 + 1]) << 32;
        attend_tile<Cfg, QK_CHAINS>(addrs, smem_u32(sKv + first * kRowStride), valid, scale_log2, sP, sMax, state);
    }
    float inv[2], lse[2];
    state.finish(sSum, inv, lse);   // its __syncthreads also ends every warp's reads of the KV rows

    // The normalised partial into this CTA's shared memory, for the cluster to merge.
    float* part0 = sPart + group * kDimCkv + warp * Cfg::kDimsPerWarp + quad * 2;
    float* part1 = part0 + 8 * kDimCkv;
#pragma unroll
    for (int t = 0; t < Cfg::kPvTiles; ++t) {
        *reinterpret_cast<float2*>(part0 + t * 8) = make_float2(state.acc_o[t][0] * inv[0], state.acc_o[t][1] * inv[0]);
        *reinterpret_cast<float2*>(part1 + t * 8) = make_float2(state.acc_o[t][2] * inv[1], state.acc_o[t][3] * inv[1]);
    }
    if (warp == 0 && quad == 0) {
        sPartLse[group] = lse[0];
        sPartLse[group + 8] = lse[1];
    }
    cluster_arrive_release();
    cluster_wait_acquire();   // every CTA's partial is written and visible to the cluster

    // CTA r merges head r: thread c folds value dims 4c .. 4c + 3 over the 16 partials, in rank order.
    const int head = rank;
    if (tid < kDimCkv / 4) {
        float part_lse[kClusterSplits];
        float mx = kNegInf;
#pragma unroll
        for (int j = 0; j < kClusterSplits; ++j) {
            part_lse[j] = cluster.map_shared_rank(sPartLse, j)[head];
            mx = fmaxf(mx, part_lse[j]);
        }
        const float offset = mx == kNegInf ? 0.f : mx;   // no valid row in the whole token: every weight is 0
        float4 x[kClusterSplits];
#pragma unroll
        for (int j = 0; j < kClusterSplits; ++j)
            x[j] = reinterpret_cast<const float4*>(cluster.map_shared_rank(sPart, j) + head * kDimCkv)[tid];
        float total = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int j = 0; j < kClusterSplits; ++j) {
            const float w = fast_exp2(part_lse[j] - offset);
            total += w;
            acc.x += w * x[j].x;
            acc.y += w * x[j].y;
            acc.z += w * x[j].z;
            acc.w += w * x[j].w;
        }
        cluster_arrive_release();   // done with the other CTAs' shared memory
        const float inv_total = total > 0.f ? 1.f / total : 0.f;
        const size_t out_row = static_cast<size_t>(token) * kHeads + head;
        reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.output) + out_row * kDimCkv)[tid] =
            make_uint2(pack_bf16x2(acc.x * inv_total, acc.y * inv_total),
                       pack_bf16x2(acc.z * inv_total, acc.w * inv_total));
        if (tid == 0) p.lse[out_row] = total > 0.f ? mx + log2f(total) : kNegInf;
    } else {
        cluster_arrive_release();
    }
    cluster_wait_acquire();   // no CTA leaves while another may still read its shared memory
}

// ---- merge kernel ------------------------------------------------------------------------------------------------

constexpr int kMergeWarps = 4;
constexpr int kMergeDims = 128;   // value dims per CTA: 32 lanes x 4

// One CTA per (token, head, 128 value dims); warp w folds splits w, w + 4, ... and the CTA adds the four up.
template <bool PDL>
__global__ void __launch_bounds__(kMergeWarps * 32) dsa_attention_merge_kernel(const DsaAttentionParams p) {
    if constexpr (PDL) pdl_wait_primary();  // partials are complete and visible past this point
    constexpr int kChunks = kDimCkv / kMergeDims;
    const int chunk = blockIdx.x % kChunks, head = (blockIdx.x / kChunks) % kHeads;
    const int token = blockIdx.x / (kChunks * kHeads);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int splits = p.splits;
    const float* lse_col = p.partial_lse + static_cast<size_t>(token) * splits * kHeads + head;

    float mx = kNegInf;
    for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, __ldcg(lse_col + s * kHeads));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float offset = mx == kNegInf ? 0.f : mx;   // no valid row at all: every weight is 0
    float total = 0.f;
    for (int s = lane; s < splits; s += 32) total += fast_exp2(__ldcg(lse_col + s * kHeads) - offset);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);

    const float* part = p.partial_out + (static_cast<size_t>(token) * splits * kHeads + head) * kDimCkv +
                        chunk * kMergeDims + lane * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = warp; s < splits; s += kMergeWarps) {
        const float w = fast_exp2(__ldcg(lse_col + s * kHeads) - offset);
        const float4 x = __ldcg(reinterpret_cast<const float4*>(part + static_cast<size_t>(s) * kHeads * kDimCkv));
        acc.x += w * x.x;
        acc.y += w * x.y;
        acc.z += w * x.z;
        acc.w += w * x.w;
    }
    __shared__ float4 sAcc[kMergeWarps - 1][32];
    if (warp > 0) sAcc[warp - 1][lane] = acc;
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int w = 0; w < kMergeWarps - 1; ++w) {
        const float4 x = sAcc[w][lane];
        acc.x += x.x;
        acc.y += x.y;
        acc.z += x.z;
        acc.w += x.w;
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    uint2 packed;
    packed.x = pack_bf16x2(acc.x * inv, acc.y * inv);
    packed.y = pack_bf16x2(acc.z * inv, acc.w * inv);
    const size_t out_row = static_cast<size_t>(token) * kHeads + head;
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.output) + out_row * kDimCkv + chunk * kMergeDims +
                              lane * 4) = packed;
    if (chunk == 0 && lane == 0) p.lse[out_row] = total > 0.f ? mx + log2f(total) : kNegInf;
}

// ---- host side ---------------------------------------------------------------------------------------------------

// One wave of split CTAs: as many splits per token as fill the SMs, capped by MAX_SPLITS (the merge reads
// splits x 32 KB per token, so more splits are not free).
template <int MAX_SPLITS>
inline int choose_splits(int num_tokens, int num_sms) {
    const int fill = num_sms / (num_tokens > 0 ? num_tokens : 1);
    return fill < 1 ? 1 : (fill > MAX_SPLITS ? MAX_SPLITS : fill);
}

template <int BLOCK_N, int STAGES, int NUM_WARPS, bool PDL, bool FUSED = false, int QK_CHAINS = 1>
cudaError_t launch(const DsaAttentionParams& p, cudaStream_t stream) {
    using Cfg = SplitConfig<BLOCK_N, STAGES, NUM_WARPS>;
    if (p.num_tokens <= 0) return cudaSuccess;
    constexpr auto split_kernel = dsa_attention_split_kernel<BLOCK_N, STAGES, NUM_WARPS, FUSED, QK_CHAINS>;
    cudaError_t err = sm90::opt_in_smem<split_kernel>(Cfg::kMaxSmemBytes);  // once per device
    if (err != cudaSuccess) return err;
    if constexpr (FUSED) {
        // The grid barrier needs every CTA resident at once: the cooperative launch guarantees it (or fails).
        // splits > 1 only when tokens * splits <= SMs (choose_splits), so the grid is one CTA per SM at most.
        if (p.splits > kMergeMaxSplits) return cudaErrorInvalidValue;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(p.num_tokens * p.splits);
        config.blockDim = dim3(Cfg::kThreads);
        config.dynamicSmemBytes = Cfg::smem_bytes(p.splits);
        config.stream = stream;
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeCooperative;
        attribute[0].val.cooperative = 1;
        config.attrs = attribute;
        config.numAttrs = p.splits > 1 ? 1 : 0;
        return cudaLaunchKernelEx(&config, split_kernel, p);
    } else {
        err = sm90::launch(split_kernel, p.num_tokens * p.splits, Cfg::kThreads, Cfg::smem_bytes(p.splits), stream, p);
        if (err != cudaSuccess) return err;
        return sm90::launch_ex(PDL, dsa_attention_merge_kernel<PDL>, p.num_tokens * kHeads * (kDimCkv / kMergeDims),
                               kMergeWarps * 32, 0, stream, p);
    }
}

// MERGE = 2: one cluster of 16 CTAs per token (clusters beyond what the device holds at once run as later waves).
template <int BLOCK_N, int NUM_WARPS, int QK_CHAINS>
cudaError_t launch_cluster(const DsaAttentionParams& p, cudaStream_t stream) {
    using Cfg = ClusterConfig<BLOCK_N, NUM_WARPS>;
    if (p.num_tokens <= 0) return cudaSuccess;
    constexpr auto kernel = dsa_attention_cluster_kernel<BLOCK_N, NUM_WARPS, QK_CHAINS>;
    cudaError_t err = sm90::opt_in_smem<kernel>(Cfg::kSmemBytes, /*non_portable_cluster=*/true);
    if (err != cudaSuccess) return err;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = kClusterSplits;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(p.num_tokens) * kClusterSplits);
    config.blockDim = dim3(Cfg::kThreads);
    config.dynamicSmemBytes = Cfg::kSmemBytes;
    config.stream = stream;
    config.attrs = attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, p);
}

}  // namespace dsa_attn

#ifdef DSA_ATTENTION_SELF_CHECK
// `nvcc -DDSA_ATTENTION_SELF_CHECK -x cu -c dsa_sparse_attention.cuh` compiles this header alone at one setting.
template cudaError_t dsa_attn::launch<64, 2, 4, true>(const DsaAttentionParams&, cudaStream_t);
template cudaError_t dsa_attn::launch<64, 2, 4, false, true, 2>(const DsaAttentionParams&, cudaStream_t);
template cudaError_t dsa_attn::launch_cluster<64, 4, 2>(const DsaAttentionParams&, cudaStream_t);
#endif

// DeepSeek-V3.2 sparse-attention indexer, decode: top-2048 tokens of a paged FP8 K cache, for Hopper (sm_90a).
//
//   score[b, t] = sum_h w[b, h] * relu(q[b, h] . k_t * scale_t)      (64 heads x 128 dims, fp32 result)
//   out[b, :]   = global ids (block_table[b, t / 64] * 64 + t % 64) of the 2048 best t < seq_len[b], -1 padded
//
// One launch, one thread-block cluster per batch row:
//   * rows with seq_len <= 2048 select every valid token: the cluster only translates ids (no scoring);
//   * longer rows split their pages over the cluster's CTAs. Each CTA streams whole pages (8448 contiguous bytes)
//     into a cp.async ring, widens the e4m3 bytes to f16 (exact) and scores 16-token tiles with f16 mma.sync and
//     fp32 accumulation (tokens = M, heads = N, so the head reduction is in-thread plus a 4-lane shuffle). Hopper
//     has no native FP8 mma.sync (ptxas lowers m16n8k32.e4m3 to these same f16 MMAs plus per-use conversions),
//     so q is widened once, up front, and stays in registers;
//   * every score goes to rank 0's shared memory (DSMEM) as an order-preserving uint32 key, together with an
//     atomic count in rank 0's histogram of the keys' top 12 bits: the first radix digit is counted by then;
//   * after one cluster barrier, rank 0 reads the threshold digit off that histogram and, in one pass over the
//     row's keys, writes the ids above it (in position order) and gathers the keys at it (the candidates,
//     usually a few hundred). Up to one candidate per thread, each candidate's exact rank is counted directly
//     (key descending, then position); more (heavy ties) take MSD radix passes over the candidates' low 20 bits
//     (12 + 8). The lowest-position ties win, so the 2048 ids are deterministic.
// The per-token K scale is applied after the dot product: relu(s * x) = s * relu(x) because the cache stores
// s = amax / 448 > 0. Nothing persists across calls; every output element is written on every call.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sm90_ptx.cuh"

namespace dsa_indexer {

namespace cg = cooperative_groups;

constexpr int kHeads = 64;
constexpr int kDim = 128;
constexpr int kPageTokens = 64;
constexpr int kTopK = 2048;
constexpr int kPageBytes = kPageTokens * (kDim + 4);  // 8448: 64 x 128 fp8 values, then 64 fp32 scales
constexpr int kScaleOffset = kPageTokens * kDim;      // 8192
constexpr int kTileTokens = 16;                       // M of mma.m16n8k16
constexpr int kTilesPerPage = kPageTokens / kTileTokens;
constexpr int kChunksPerPage = kPageBytes / 16;       // 528 cp.async chunks
constexpr int kFirstShift = 20;                       // first radix digit: key bits 31..20
constexpr int kHistBins = 4096;                       // widest radix digit (12 bits)
constexpr int kMaxRowTokens = 65535;                  // packed 16-bit tie counters in the final scan
constexpr unsigned kFullMask = 0xffffffffu;

static_assert(kMaxRowTokens < 65536, "candidate positions are 16-bit");
static_assert(kPageBytes % 16 == 0, "pages are copied in 16-byte chunks");

// ---------------------------------------------------------------------------------------------------------------
// PTX wrappers
// ---------------------------------------------------------------------------------------------------------------

using sm90::cluster_arrive_release;  // the shared PTX helpers (templates/common/sm90_ptx.cuh)
using sm90::cluster_wait_acquire;
using sm90::cp_async_commit;
using sm90::cp_async_wait;

// D += A * B for one 16x8x16 f16 tile (fp32 accumulate), lane = 4 g + t. A regs: (row g, k 2t..2t+1),
// (row g+8, k 2t..), (row g, k 2t+8..), (row g+8, k 2t+8..); B regs: (k 2t.., column g), (k 2t+8.., column g);
// D: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two e4m3 values (low byte first) to an f16x2 (low half first); exact, e4m3 is a subset of f16.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_bytes) {
  uint32_t out;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(out) : "h"(static_cast<uint16_t>(two_bytes)));
  return out;
}

__device__ __forceinline__ uint4 load_shared_16(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }

// ---------------------------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------------------------

// Valid tokens of a row: seq_len clamped to [0, the block table's capacity], as the reference masks.
__device__ __forceinline__ int row_length(int seq_len, int max_pages) {
  return min(max(seq_len, 0), max_pages * kPageTokens);
}

__device__ __forceinline__ int token_id(const int* bt_row, int position) {
  return bt_row[position / kPageTokens] * kPageTokens + position % kPageTokens;
}

// Rows with seq_len <= 2048 keep every valid token: out[i] = id(i) for i < n, -1 after, for i in [begin, end).
__device__ __forceinline__ void emit_all_tokens(int* out_row, const int* bt_row, int n, int begin, int end,
                                                int tid, int nthreads) {
  for (int i = begin + tid; i < end; i += nthreads) out_row[i] = i < n ? token_id(bt_row, i) : -1;
}

// Monotone map of fp32 onto uint32: a > b (as floats) implies key(a) > key(b).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of one value per thread over the block (thread order); `total` receives the block's sum.
// Two barriers; `warp_totals` holds THREADS / 32 words and is free again on return.
template <int THREADS>
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t value, uint32_t* warp_totals, uint32_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t other = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  uint32_t base = 0, sum = 0;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) {
    const uint32_t v = warp_totals[w];
    base += w < warp ? v : 0u;
    sum += v;
  }
  __syncthreads();
  total = sum;
  return base + inclusive - value;
}

template <int THREADS>
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t value, uint32_t* warp_totals) {
  uint32_t total;
  return block_exclusive_sum<THREADS>(value, warp_totals, total);
}

// ---------------------------------------------------------------------------------------------------------------
// Radix select (rank 0 of a cluster, one row's keys in its shared memory)
// ---------------------------------------------------------------------------------------------------------------

struct SelectScratch {
  uint32_t warp_totals[16];
  uint32_t digit, above, in_digit;
};

// Histogram of digit (key >> SHIFT) & (2^BITS - 1) over the keys whose bits above SHIFT + BITS equal `prefix`'s.
template <int SHIFT, int BITS, int THREADS>
__device__ void radix_count(const uint32_t* keys, int n, uint32_t* hist, uint32_t prefix) {
  constexpr int kBins = 1 << BITS;
  static_assert(kBins <= kHistBins && SHIFT + BITS < 32, "digit layout (the top digit is counted while scoring)");
  const int tid = threadIdx.x;
  for (int e = tid; e < kBins; e += THREADS) hist[e] = 0;
  __syncthreads();
  for (int i = tid; i < n; i += THREADS) {
    const uint32_t key = keys[i];
    if ((key >> (SHIFT + BITS)) == (prefix >> (SHIFT + BITS))) atomicAdd(&hist[(key >> SHIFT) & (kBins - 1)], 1u);
  }
  __syncthreads();
}

// From a digit histogram of the keys sharing `prefix`: finds the digit holding the need-th largest of them,
// removes the keys of higher digits from `need` and appends the digit to `prefix`. Returns true when the keys
// sharing the new prefix are exactly the `need` still missing (all of them are taken: no further pass).
// scratch->above / in_digit keep the counts of the higher digits and of the chosen one.
template <int SHIFT, int BITS, int THREADS>
__device__ bool radix_find(const uint32_t* hist, SelectScratch* scratch, uint32_t& prefix, uint32_t& need) {
  constexpr int kBins = 1 << BITS;
  constexpr int kPer = kBins >= THREADS ? kBins / THREADS : 1;  // threads past kBins own none
  static_assert(kBins % THREADS == 0 || THREADS % kBins == 0, "bins split evenly over threads");
  // Thread j owns the kPer bins [low_j, low_j + kPer), thread 0 the highest: the exclusive sum over threads is
  // then the count of keys in higher bins, and exactly one thread's range holds the crossing. The bins are read
  // once, as 16-byte vectors where they allow, and searched in registers.
  const int low = kBins - (static_cast<int>(threadIdx.x) + 1) * kPer;
  uint32_t bins[kPer];
  if constexpr (kPer % 4 == 0) {
#pragma unroll
    for (int v = 0; v < kPer / 4; ++v) {
      const uint4 four = *reinterpret_cast<const uint4*>(hist + low + 4 * v);
      bins[4 * v] = four.x, bins[4 * v + 1] = four.y, bins[4 * v + 2] = four.z, bins[4 * v + 3] = four.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kPer; ++e) bins[e] = low >= 0 ? hist[low + e] : 0u;
  }
  uint32_t local = 0;
#pragma unroll
  for (int e = 0; e < kPer; ++e) local += bins[e];
  const uint32_t above = block_exclusive_sum<THREADS>(local, scratch->warp_totals);
  if (above < need && need <= above + local) {
    uint32_t acc = above;
    bool found = false;
#pragma unroll
    for (int e = kPer - 1; e >= 0; --e) {  // highest bin first
      if (!found && acc + bins[e] >= need) {
        found = true;
        scratch->digit = static_cast<uint32_t>(low + e);
        scratch->above = acc;
        scratch->in_digit = bins[e];
      }
      acc += bins[e];
    }
  }
  __syncthreads();
  prefix |= scratch->digit << SHIFT;
  need -= scratch->above;
  return scratch->in_digit == need;
}

// Up to THREADS candidates (keys sharing their top digit, in position order): thread i counts candidate i's exact
// rank (larger keys, then equal keys at lower positions) and writes it to out[rank] if the rank is below `need`.
// Deterministic; exactly `need` writes; no barrier.
template <int THREADS>
__device__ void rank_candidates(const uint32_t* keys, const uint16_t* positions, int m, uint32_t need,
                                const int* bt_row, int* out) {
  const int i = threadIdx.x;
  if (i >= m) return;
  const uint32_t key = keys[i];
  uint32_t rank = 0;
  int j = 0;
  for (; j + 4 <= m; j += 4) {  // every thread reads the same words: broadcasts
    const uint4 o = *reinterpret_cast<const uint4*>(keys + j);
    rank += (o.x > key) + (o.y > key) + (o.z > key) + (o.w > key);
    rank += (o.x == key && j < i) + (o.y == key && j + 1 < i) + (o.z == key && j + 2 < i) + (o.w == key && j + 3 < i);
  }
  for (; j < m; ++j) rank += keys[j] > key || (keys[j] == key && j < i);
  if (rank < need) out[rank] = token_id(bt_row, positions[i]);
}

// Writes `slots` selected ids: keys whose top (32 - shift) bits exceed the pivot's (in array order) from out[0],
// then the first `need` keys equal to it (also in array order) ending at out[slots - 1]. position(i) is the row
// position of keys[i]. Deterministic; exactly `slots` writes.
template <int THREADS, typename Position>
__device__ void emit_selected(const uint32_t* keys, int n, int shift, uint32_t prefix, uint32_t need, int slots,
                              SelectScratch* scratch, const int* bt_row, int* out, Position position) {
  const uint32_t pivot = prefix >> shift;
  const int per_thread = (n + THREADS - 1) / THREADS;
  const int lo = min(n, static_cast<int>(threadIdx.x) * per_thread), hi = min(n, lo + per_thread);
  uint32_t greater = 0, equal = 0;
  for (int i = lo; i < hi; ++i) {
    const uint32_t k = keys[i] >> shift;
    greater += k > pivot;
    equal += k == pivot;
  }
  // Packed 16 + 16 bits: at most kTopK keys are greater, at most n <= kMaxRowTokens equal.
  const uint32_t before = block_exclusive_sum<THREADS>(greater | (equal << 16), scratch->warp_totals);
  uint32_t greater_pos = before & 0xffffu, tie_rank = before >> 16;
  const uint32_t ties_start = slots - need;
  for (int i = lo; i < hi; ++i) {
    const uint32_t k = keys[i] >> shift;
    if (k > pivot) {
      out[greater_pos++] = token_id(bt_row, position(i));
    } else if (k == pivot) {
      if (tie_rank < need) out[ties_start + tie_rank] = token_id(bt_row, position(i));
      ++tie_rank;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Kernel configuration
// ---------------------------------------------------------------------------------------------------------------

// HEAD_SPLIT: warps per 16-token tile (each takes 64 / HEAD_SPLIT heads; partial scores summed in a fixed order).
// Each warp keeps its heads' q as f16 mma fragments in registers: 32 heads -> 64 registers, 16 heads -> 32.
// STAGES: pages in each cp.async ring (STAGES - 1 pages in flight while one is scored).
// GROUPS: independent page pipelines per CTA (each 4 x HEAD_SPLIT warps with its own ring, partial scores and
// named barrier; a CTA's pages alternate between them), so one CTA keeps more pages in flight and in the MMAs.
template <int HEAD_SPLIT, int STAGES, int GROUPS>
struct Config {
  static_assert(HEAD_SPLIT == 2 || HEAD_SPLIT == 4, "HEAD_SPLIT must be 2 or 4 (64 heads of f16 q fragments "
                                                    "do not fit one warp's registers)");
  static_assert(STAGES >= 2 && STAGES <= 8, "STAGES must be in [2, 8]");
  static_assert(GROUPS >= 1 && HEAD_SPLIT * GROUPS <= 4, "GROUPS x HEAD_SPLIT at most 4 (512 threads)");
  static constexpr int kGroupWarps = kTilesPerPage * HEAD_SPLIT;
  static constexpr int kGroupThreads = 32 * kGroupWarps;
  static constexpr int kThreads = kGroupThreads * GROUPS;
  static constexpr int kHeadsPerWarp = kHeads / HEAD_SPLIT;
  static constexpr int kNTiles = kHeadsPerWarp / 8;
  static constexpr int kKSteps = kDim / 16;
  // Two CTAs of 256 threads per SM (<= 128 registers); 512-thread CTAs would spill at 64, so they get one.
  static constexpr int kMinBlocksPerSM = kThreads == 256 ? 2 : 1;
  // Shared memory, all offsets multiples of 128 B:
  //   reused      while scoring, the cp.async rings (GROUPS x STAGES pages); once rank 0 selects, its
  //               candidates (max_pages x 64 keys, then as many u16 positions)
  //   hist        4096 u32: rank 0's radix histogram (first digit filled remotely while scoring)
  //   scratch     SelectScratch
  //   weights     64 fp32 head weights of the row
  //   page_scores GROUPS x HEAD_SPLIT x 64 fp32: each group's current page's per-head-split partial scores
  //   keys        max_pages x 64 u32: rank 0's order keys of the whole row (filled remotely)
  //   table       max_pages i32: rank 0's copy of the row's block table (the select translates ids from it)
  static constexpr int kRingBytes = STAGES * kPageBytes;  // one group's
  static constexpr int kRingsBytes = GROUPS * kRingBytes;
  static constexpr int kPageScoresBytes = GROUPS * HEAD_SPLIT * kPageTokens * 4;
  static constexpr int kFixedBytes = kHistBins * 4 + 128 + kHeads * 4 + kPageScoresBytes;
  static_assert(sizeof(SelectScratch) <= 128 && kThreads / 32 <= 16, "scratch fits its slot");
  static_assert(kFixedBytes % 128 == 0, "aligned regions");

  __host__ __device__ static constexpr int reused_bytes(int max_pages) {
    return ((kRingsBytes > max_pages * kPageTokens * 6 ? kRingsBytes : max_pages * kPageTokens * 6) + 127) / 128 * 128;
  }
  __host__ __device__ static constexpr int hist_offset(int max_pages) { return reused_bytes(max_pages); }
  __host__ __device__ static constexpr int scratch_offset(int max_pages) { return hist_offset(max_pages) + kHistBins * 4; }
  __host__ __device__ static constexpr int weights_offset(int max_pages) { return scratch_offset(max_pages) + 128; }
  __host__ __device__ static constexpr int page_scores_offset(int max_pages) { return weights_offset(max_pages) + kHeads * 4; }
  __host__ __device__ static constexpr int keys_offset(int max_pages) {
    return page_scores_offset(max_pages) + kPageScoresBytes;
  }
  __host__ __device__ static constexpr int table_offset(int max_pages) {
    return keys_offset(max_pages) + max_pages * kPageTokens * 4;
  }
  // Dynamic shared memory for a block table of `max_pages` columns.
  static constexpr size_t smem_bytes(int max_pages) {
    return static_cast<size_t>(table_offset(max_pages)) + static_cast<size_t>(max_pages) * 4;
  }
  // Block-table entries each thread of rank 0 holds in registers while the row is scored.
  static constexpr int kTableRegs = (kMaxRowTokens / kPageTokens + kThreads) / kThreads;
};

// ---------------------------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------------------------

// Batches whose block table holds at most 2048 tokens: every row keeps all of its valid tokens.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) emit_short_rows_kernel(const int* __restrict__ seq_lens,
                                                                  const int* __restrict__ block_table,
                                                                  int max_pages, int* __restrict__ out) {
  const int b = blockIdx.x;
  const int n = row_length(seq_lens[b], max_pages);
  emit_all_tokens(out + static_cast<size_t>(b) * kTopK, block_table + static_cast<size_t>(b) * max_pages, n, 0,
                  kTopK, threadIdx.x, THREADS);
}

// grid (cluster size, B), cluster (cluster size, 1, 1); cluster size a power of two <= 16.
template <int HEAD_SPLIT, int STAGES, int GROUPS>
__global__ void __launch_bounds__(Config<HEAD_SPLIT, STAGES, GROUPS>::kThreads,
                                  Config<HEAD_SPLIT, STAGES, GROUPS>::kMinBlocksPerSM)
score_select_kernel(const uint8_t* __restrict__ q,        // [B, 64, 128] e4m3
                    const uint8_t* __restrict__ k_cache,  // [P, 8448] per page: 64 x 128 e4m3, 64 fp32 scales
                    const float* __restrict__ weights,    // [B, 64]
                    const int* __restrict__ seq_lens,     // [B]
                    const int* __restrict__ block_table,  // [B, max_pages]
                    int max_pages,
                    int* __restrict__ out) {              // [B, 2048]
  using Cfg = Config<HEAD_SPLIT, STAGES, GROUPS>;
  constexpr int kThreads = Cfg::kThreads;
  constexpr int kGroupThreads = Cfg::kGroupThreads;
  constexpr int kNTiles = Cfg::kNTiles;
  extern __shared__ __align__(128) uint8_t smem[];

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int cluster_size = static_cast<int>(cluster.num_blocks());
  const int b = blockIdx.y;
  const int tid = threadIdx.x;
  const int n = row_length(seq_lens[b], max_pages);
  int* out_row = out + static_cast<size_t>(b) * kTopK;
  const int* bt_row = block_table + static_cast<size_t>(b) * max_pages;

  // Loads that need only b and the thread go out before seq_len is back (one memory latency instead of two or
  // three in a row): q as f16 fragments, the head weights, the table entries of this group's first pages (pages
  // are dealt round-robin over the cluster, so which ones does not depend on n) and rank 0's copy of the whole
  // table row. A CTA of a short row wastes them (8 KB).
  const int group = tid / kGroupThreads, gtid = tid % kGroupThreads;
  const int warp = gtid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int tile = warp % kTilesPerPage;
  const int head_part = warp / kTilesPerPage;
  const int head_base = head_part * Cfg::kHeadsPerWarp;

  // The contraction over the 128 dims is order-free, so logical k = 16 s + 8 c + 2 t + e (k-step s, register
  // c, lane t, element e) is mapped to physical dim 32 t + 4 s + 2 c + e for both operands: lane t then owns the
  // 32 contiguous bytes [32 t, 32 t + 32) of every row it touches (two 16-byte loads); byte word s of them feeds
  // k-step s, its low half register c = 0 and its high half c = 1.
  uint32_t q_frag[kNTiles][Cfg::kKSteps][2];
  const uint8_t* q_row = q + static_cast<size_t>(b) * kHeads * kDim;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const uint4* src = reinterpret_cast<const uint4*>(q_row + (head_base + 8 * j + g) * kDim + 32 * t);
    const uint4 lo = __ldg(src), hi = __ldg(src + 1);
    const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int s = 0; s < Cfg::kKSteps; ++s) {
      q_frag[j][s][0] = e4m3x2_to_f16x2(words[s]);
      q_frag[j][s][1] = e4m3x2_to_f16x2(words[s] >> 16);
    }
  }
  const float head_weight = tid < kHeads ? __ldg(weights + static_cast<size_t>(b) * kHeads + tid) : 0.f;
  // Group `group` scores this CTA's pages group, group + GROUPS, ... (the CTA's j-th page is rank + j x cluster
  // size): its i-th lands in slot i % STAGES of its ring.
  auto page_of = [&](int i) { return rank + (group + i * GROUPS) * cluster_size; };
  int first_pages[STAGES - 1];
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) first_pages[s] = page_of(s) < max_pages ? __ldg(bt_row + page_of(s)) : 0;
  int table_regs[Cfg::kTableRegs];
#pragma unroll
  for (int r = 0; r < Cfg::kTableRegs; ++r) {
    const int column = tid + r * kThreads;
    table_regs[r] = rank == 0 && column < max_pages ? __ldg(bt_row + column) : 0;
  }

  if (n <= kTopK) {  // uniform over the cluster: no scoring, no barrier
    const int slice = kTopK / cluster_size;
    emit_all_tokens(out_row, bt_row, n, rank * slice, (rank + 1) * slice, tid, kThreads);
    return;
  }

  uint8_t* rings = smem;  // the reused region
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + Cfg::hist_offset(max_pages));
  SelectScratch* scratch = reinterpret_cast<SelectScratch*>(smem + Cfg::scratch_offset(max_pages));
  float* head_weights = reinterpret_cast<float*>(smem + Cfg::weights_offset(max_pages));
  float* page_scores = reinterpret_cast<float*>(smem + Cfg::page_scores_offset(max_pages));
  uint32_t* keys = reinterpret_cast<uint32_t*>(smem + Cfg::keys_offset(max_pages));
  uint32_t* hist_rank0 = cluster.map_shared_rank(hist, 0);
  uint32_t* keys_rank0 = cluster.map_shared_rank(keys, 0);

  // Rank 0 clears the histogram the whole cluster counts into; the handshake barrier publishes it and also
  // guarantees that every CTA of the cluster runs before anybody touches rank 0's shared memory.
  if (rank == 0) {
    for (int e = tid; e < kHistBins; e += kThreads) hist[e] = 0;
  }
  cluster_arrive_release();

  const int npages = (n + kPageTokens - 1) / kPageTokens;
  const int my_pages = npages > rank ? (npages - rank + cluster_size - 1) / cluster_size : 0;
  const int group_pages = my_pages > group ? (my_pages - group + GROUPS - 1) / GROUPS : 0;
  uint8_t* ring = rings + group * Cfg::kRingBytes;
  float* group_scores = page_scores + group * HEAD_SPLIT * kPageTokens;
  // The group's i-th page (table entry `page`) into its ring slot; an empty cp.async group keeps the wait counts
  // uniform.
  auto issue_page = [&](int i, int page) {
    if (i < group_pages) {
      const uint8_t* src = k_cache + static_cast<size_t>(page) * kPageBytes;
      uint8_t* dst = ring + (i % STAGES) * kPageBytes;
      for (int c = gtid; c < kChunksPerPage; c += kGroupThreads)
        sm90::cp_async_16(sm90::smem_u32(dst + 16 * c), src + 16 * c);
    }
    cp_async_commit();
  };
  auto group_sync = [&] {
    if constexpr (GROUPS == 1) {
      __syncthreads();
    } else {
      sm90::named_barrier_sync(1 + group, kGroupThreads);
    }
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue_page(s, first_pages[s]);

  // Warp roles: 16-token tile `tile` of every page, heads [head_base, head_base + 64 / HEAD_SPLIT).

  // Head weights wait in shared memory (registers go to the q fragments).
  if (tid < kHeads) head_weights[tid] = head_weight;
  __syncthreads();  // publishes them to every group (the cluster handshake's arrive came before they were written)

  cluster_wait_acquire();

  for (int i = 0; i < group_pages; ++i) {
    const int ahead = i + STAGES - 1;  // into the slot of page i - 1, released by the barrier after its scoring
    issue_page(ahead, ahead < group_pages ? bt_row[page_of(ahead)] : 0);
    cp_async_wait<STAGES - 1>();  // this thread's chunks of page i have landed
    group_sync();                 // ... and the whole group's

    const uint8_t* stage = ring + (i % STAGES) * kPageBytes;
    const uint8_t* row_lo = stage + (tile * kTileTokens + g) * kDim + 32 * t;  // token g of the tile
    const uint8_t* row_hi = row_lo + 8 * kDim;                                   // token g + 8
    const uint4 lo0 = load_shared_16(row_lo), lo1 = load_shared_16(row_lo + 16);
    const uint4 hi0 = load_shared_16(row_hi), hi1 = load_shared_16(row_hi + 16);
    const uint32_t k_lo[8] = {lo0.x, lo0.y, lo0.z, lo0.w, lo1.x, lo1.y, lo1.z, lo1.w};
    const uint32_t k_hi[8] = {hi0.x, hi0.y, hi0.z, hi0.w, hi1.x, hi1.y, hi1.z, hi1.w};

    float acc[kNTiles][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
    for (int s = 0; s < Cfg::kKSteps; ++s) {
      const uint32_t a0 = e4m3x2_to_f16x2(k_lo[s]), a1 = e4m3x2_to_f16x2(k_hi[s]);
      const uint32_t a2 = e4m3x2_to_f16x2(k_lo[s] >> 16), a3 = e4m3x2_to_f16x2(k_hi[s] >> 16);
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) mma_f16(acc[j], a0, a1, a2, a3, q_frag[j][s][0], q_frag[j][s][1]);
    }

    // acc[j] = {(g, 8j+2t), (g, 8j+2t+1), (g+8, 8j+2t), (g+8, 8j+2t+1)} as (token, head): weight, relu, sum.
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const float2 w = *reinterpret_cast<const float2*>(head_weights + head_base + 8 * j + 2 * t);
      sum_lo = fmaf(w.x, fmaxf(acc[j][0], 0.f), sum_lo);
      sum_lo = fmaf(w.y, fmaxf(acc[j][1], 0.f), sum_lo);
      sum_hi = fmaf(w.x, fmaxf(acc[j][2], 0.f), sum_hi);
      sum_hi = fmaf(w.y, fmaxf(acc[j][3], 0.f), sum_hi);
    }
    // The four lanes of a quad hold the other heads; the butterfly leaves the same sum in all four.
    sum_lo += __shfl_xor_sync(kFullMask, sum_lo, 1);
    sum_hi += __shfl_xor_sync(kFullMask, sum_hi, 1);
    sum_lo += __shfl_xor_sync(kFullMask, sum_lo, 2);
    sum_hi += __shfl_xor_sync(kFullMask, sum_hi, 2);

    const float* scales = reinterpret_cast<const float*>(stage + kScaleOffset);
    const int tile_token = tile * kTileTokens + g;
    float* partial = group_scores + head_part * kPageTokens + tile_token;
    if (t == 0) partial[0] = sum_lo * scales[tile_token];
    if (t == 1) partial[8] = sum_hi * scales[tile_token + 8];
    group_sync();  // page i's slot is free for the next copy; its partial scores are complete

    // One thread per token: fixed-order sum of the head-split partials, then the key and its first-digit count
    // go to rank 0. (The partials are rewritten only after the next iteration's first barrier.)
    const int position = page_of(i) * kPageTokens + gtid;
    if (gtid < kPageTokens && position < n) {
      float score = group_scores[gtid];
#pragma unroll
      for (int h = 1; h < HEAD_SPLIT; ++h) score += group_scores[h * kPageTokens + gtid];
      const uint32_t key = order_key(score);
      keys_rank0[position] = key;
      atomicAdd(hist_rank0 + (key >> kFirstShift), 1u);
    }
  }
  cp_async_wait<0>();  // only empty groups can remain
  int* table = reinterpret_cast<int*>(smem + Cfg::table_offset(max_pages));
  if (rank == 0) {
#pragma unroll
    for (int r = 0; r < Cfg::kTableRegs; ++r)
      if (tid + r * kThreads < max_pages) table[tid + r * kThreads] = table_regs[r];
  }

  // Every key of the row, and the first-digit histogram, are in rank 0 once all threads of the cluster have
  // passed this barrier.
  cluster_arrive_release();
  cluster_wait_acquire();
  if (rank != 0) return;
  bt_row = table;  // ids are translated from shared memory: one global round trip per emitted id was ~2 us

  // The threshold digit, then one pass: ids above it to the output, keys at it to the candidate list (both in
  // position order, at offsets from one block scan; 16 + 16 packed bits: at most 2048 above, n < 65536 at it).
  uint32_t prefix = 0, need = kTopK;
  radix_find<kFirstShift, 32 - kFirstShift, kThreads>(hist, scratch, prefix, need);
  const uint32_t above_digit = kTopK - need;
  const int m = static_cast<int>(scratch->in_digit);
  const uint32_t pivot = prefix >> kFirstShift;
  uint32_t* cand_keys = reinterpret_cast<uint32_t*>(rings);  // the rings are idle: every copy has landed
  uint16_t* cand_pos = reinterpret_cast<uint16_t*>(cand_keys + max_pages * kPageTokens);
  {
    const int per_thread = (n + kThreads - 1) / kThreads;
    const int lo = min(n, tid * per_thread), hi = min(n, lo + per_thread);
    uint32_t greater = 0, equal = 0;
    for (int i = lo; i < hi; ++i) {
      const uint32_t d = keys[i] >> kFirstShift;
      greater += d > pivot;
      equal += d == pivot;
    }
    const uint32_t before = block_exclusive_sum<kThreads>(greater | (equal << 16), scratch->warp_totals);
    uint32_t greater_pos = before & 0xffffu, equal_pos = before >> 16;
    for (int i = lo; i < hi; ++i) {
      const uint32_t key = keys[i];
      const uint32_t d = key >> kFirstShift;
      if (d > pivot) {
        out_row[greater_pos++] = token_id(bt_row, i);
      } else if (d == pivot) {
        cand_keys[equal_pos] = key;
        cand_pos[equal_pos] = static_cast<uint16_t>(i);
        ++equal_pos;
      }
    }
  }
  __syncthreads();

  // The `need` best candidates fill out[above_digit, 2048).
  int* tail = out_row + above_digit;
  if (m <= kThreads) {
    rank_candidates<kThreads>(cand_keys, cand_pos, m, need, bt_row, tail);
    return;
  }
  int shift = kFirstShift;
  if (static_cast<uint32_t>(m) != need) {
    shift = 8;
    radix_count<8, 12, kThreads>(cand_keys, m, hist, prefix);
    if (!radix_find<8, 12, kThreads>(hist, scratch, prefix, need)) {
      shift = 0;
      radix_count<0, 8, kThreads>(cand_keys, m, hist, prefix);
      radix_find<0, 8, kThreads>(hist, scratch, prefix, need);
    }
  }
  emit_selected<kThreads>(cand_keys, m, shift, prefix, need, kTopK - static_cast<int>(above_digit), scratch, bt_row,
                          tail, [cand_pos](int i) { return static_cast<int>(cand_pos[i]); });
}

}  // namespace dsa_indexer

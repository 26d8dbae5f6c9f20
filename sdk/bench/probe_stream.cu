// The probe kernels of sdk/bench/probe.py: read every byte the plan names exactly once (a byte named twice is
// read twice) and write the output bytes, doing no work besides a checksum that keeps the loads from being
// optimised away. All kernels write the same output marks and the same per-warp checksum words.
//
// Two ways to name the bytes:
//  * the ranges path, for plans of at most kMaxRanges ranges (after merging touching ones): the ranges ride in the
//    kernel's parameters (__grid_constant__, the constant bank), so the first data load depends on no global
//    load. The 16-byte chunks of all range bodies form one index space, split evenly over the CTAs; a chunk's
//    range is found by walking the parameter prefix sums. Range heads and tails (< 16 bytes) are "loose" pieces
//    in the parameters, read as 4-byte words. Several kernels ("variants", probe.VARIANTS) read the same chunks,
//    so that one GPU run can compare them (each one change against the one before it, bulk apart):
//      ranges  256 threads, 5 CTAs per SM (48 registers), 8 16-byte loads per lane in flight, every load's range
//              looked up (the first few-ranges kernel);
//      lean    as ranges, but a CTA whose share lies inside one range (the usual case: ranges are long next to a
//              share) reads it at origin + 16c with 32-bit offsets: no per-load range walk, so the loads leave sooner;
//      wide    as lean with 512 threads, 1 CTA per SM, 16 loads per lane: about as many bytes in flight per SM
//              (128 KB against 160) from a fifth of the CTAs (fewer CTA launches, fewer index computations);
//      hint    as lean, with ld.global.nc.L1::no_allocate.L2::256B: no L1 allocation for data read once, and L2
//              asked to fetch whole 256-byte blocks from HBM;
//      bulk    1 CTA per SM, one thread issuing cp.async.bulk copies (TMA, up to 32 KB each) into a ring of 4
//              shared-memory stages completed by mbarriers; all threads sum a landed stage while the others are
//              in flight. No per-lane address work and no register-file limit on the bytes in flight.
//  * the pieces path, for gathered plans (many rows): a device table of pieces, one 64-bit word each: the address
//    in bits 0..47, the length in 4-byte words in bits 48..63. The host splits ranges so that a piece of 16 bytes
//    or more starts 16-byte aligned, is a multiple of 16 bytes and at most kPieceBytes long; shorter pieces
//    (range heads and tails) are read as 4-byte words. The host sorts the table by size class (chunks rounded up
//    to a power of two) and passes the class boundaries in the parameters (PieceTable), so that a kernel can pack
//    pieces of one class into a fixed-size job and find a job's pieces from its index alone. Kernels
//    (probe.PIECE_VARIANTS):
//      pieces       one warp per piece (any order), kGroup pieces a step, 4 loads a lane per piece: a 128-byte
//                   piece keeps 8 of 32 lanes busy, a 1 KB one half of each lane's slots (the first pieces kernel);
//      classed      one warp per 2 KB job of one class (16 rows of 128 B, 2 of 1 KB, 1 of 2 KB): 4 loads per lane
//                   per job whatever the row size, 2 jobs a step; classed_hint: its loads with the L2::256B hint;
//      pieces_bulk  per warp, a ring of 3 shared-memory stages of 16 KB jobs filled by TMA bulk copies (one per
//                   piece, issued by its lane), 192 KB in flight per SM with no register cost.
// Shape of all: a persistent grid (every SM, as many CTAs as fit). The output stores are issued first: they are
// posted, so the write stream overlaps the read stream.
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

// The bulk variant uses the shared Hopper helpers of templates/common (on the include path in a source
// checkout). Without them (an installed package carries only sdk/) it is left out; the other variants remain.
#if __has_include("sm90_ptx.cuh")
#define SM90_WAIT_LIMIT (1 << 22)  // a stage that never lands traps (a launch error) instead of hanging the GPU
#include "sm90_ptx.cuh"
#define FIB_PROBE_BULK 1
#else
#define FIB_PROBE_BULK 0
#endif
#if FIB_PROBE_BULK && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FIB_PROBE_BULK_DEVICE 1  // device code for sm_90 and later: the bulk kernel's body
#else
#define FIB_PROBE_BULK_DEVICE 0
#endif

namespace {

constexpr int kThreads = 256;                            // stream_pieces
constexpr int kPieceBytes = 2048;                        // must match PIECE_BYTES in probe.py
constexpr int kChunksPerLane = kPieceBytes / (32 * 16);  // 4
constexpr int kGroup = 2;                                // stream_pieces: pieces per warp step
constexpr int kClasses = 8;                              // piece size classes: up to 1, 2, 4, ..., 128 chunks
constexpr int kJobSlots = 32 * kChunksPerLane;           // stream_classed: 16-byte slots of a job (2 KB)
constexpr int kJobsPerStep = 2;                          // stream_classed: jobs per warp step (8 loads a lane)
constexpr int kMaxRanges = 96;                           // must match MAX_RANGES in probe.py
constexpr unsigned long long kAddressMask = (1ull << 48) - 1;

// The parameters of the ranges kernels, laid out word for word as probe.pack_ranges writes them.
struct Ranges {
  long long n;                            // ranges with a body (>= 16 bytes, 16-byte aligned)
  long long n_loose;                      // loose pieces: heads and tails, < 16 bytes each
  long long chunks;                       // 16-byte chunks of all bodies
  long long reserved;
  long long end[kMaxRanges];              // prefix sums: range r holds chunks [end[r-1], end[r]) (end[-1] = 0)
  unsigned long long origin[kMaxRanges];  // body address - 16 * its first chunk: chunk c is at origin[r] + 16c
  unsigned long long loose[2 * kMaxRanges];  // piece encoding (address | words << 48), at most 3 words
};
static_assert(sizeof(Ranges) == 8 * (4 + 4 * kMaxRanges), "no padding: the host packs plain 64-bit words");
static_assert(sizeof(Ranges) <= 4096, "within the classic 4 KB of kernel parameters");

__device__ __forceinline__ long long global_thread() {
  return blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
}

// Output chunk i gets the word i first (what the tests check); grid-strided, before any load is issued.
__device__ __forceinline__ void write_marks(uint4* __restrict__ dst, long long dst_chunks) {
  const long long threads = gridDim.x * static_cast<long long>(blockDim.x);
  for (long long i = global_thread(); i < dst_chunks; i += threads)
    dst[i] = make_uint4(static_cast<unsigned>(i), 0u, 0u, 0u);
}

// One checksum word per warp of the grid: the sum of every word its lanes read (mod 2^32).
__device__ __forceinline__ void store_checksum(unsigned acc, unsigned* __restrict__ sink) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) sink[global_thread() >> 5] = acc;
}

__device__ __forceinline__ unsigned sum4(uint4 v) { return v.x + v.y + v.z + v.w; }

// Heads and tails of the ranges: one loose piece per thread of the grid, at most 3 words. Issued before the
// bodies, so their loads are in flight while the bodies stream; their sum is only needed at the end.
__device__ __forceinline__ unsigned loose_sum(const Ranges& ranges) {
  const long long thread = global_thread();
  unsigned acc = 0;
  if (thread < ranges.n_loose) {
    const unsigned long long piece = ranges.loose[thread];
    const unsigned* words = reinterpret_cast<const unsigned*>(piece & kAddressMask);
    const unsigned n = static_cast<unsigned>(piece >> 48);
#pragma unroll
    for (unsigned w = 0; w < 3; ++w) acc += w < n ? __ldg(words + w) : 0u;
  }
  return acc;
}

// This CTA's share [lo, hi) of the chunk index space.
struct Share {
  long long lo, hi;
};
__device__ __forceinline__ Share share_of(const Ranges& ranges) {
  return {ranges.chunks * blockIdx.x / gridDim.x, ranges.chunks * (blockIdx.x + 1) / gridDim.x};
}

// Chunk addresses for chunk indices that only grow: the current range moves forward (rarely: ranges are long
// next to a CTA's step). Starts at the range of chunk `lo` by a binary search over the prefix sums (uniform
// across the CTA: counts the ranges that end at or before lo).
struct Cursor {
  int r = 0;
  long long end = 0;                // ranges.end[r]: the first chunk past the current range
  unsigned long long origin = 0;

  __device__ __forceinline__ Cursor(const Ranges& ranges, long long lo) {
    for (int step = 128; step > 0; step >>= 1)
      if (r + step <= ranges.n && ranges.end[r + step - 1] <= lo) r += step;
    if (r < ranges.n) {             // else lo is past every chunk and no address is asked for
      end = ranges.end[r];
      origin = ranges.origin[r];
    }
  }
  // c < ranges.chunks = end[n - 1]: the walk stops at a valid range.
  __device__ __forceinline__ unsigned long long address(const Ranges& ranges, long long c) {
    while (c >= end) {
      ++r;
      end = ranges.end[r];
      origin = ranges.origin[r];
    }
    return origin + 16ull * static_cast<unsigned long long>(c);
  }
};

template <bool Hint>
__device__ __forceinline__ uint4 load16(unsigned long long address) {
  if constexpr (Hint) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(address));
    return v;
  } else {
    return __ldg(reinterpret_cast<const uint4*>(address));
  }
}

// Chunks [begin, end), chunk i at address(i): each lane keeps Unroll 16-byte loads in flight (Threads apart, so
// a warp's loads coalesce); returns the lane's sum of their words.
template <int Threads, int Unroll, bool Hint, typename Index, typename Address>
__device__ __forceinline__ unsigned sum_chunks(Index begin, Index end, Address address) {
  unsigned acc = 0;
  for (Index first = begin + threadIdx.x; first < end; first += Threads * Unroll) {
    uint4 v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const Index i = first + u * Threads;
      v[u] = i < end ? load16<Hint>(address(i)) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) acc += sum4(v[u]);
  }
  return acc;
}

// Plain loads. Lean: a share inside one range (the usual case: ranges are long next to a share) is read at
// origin + 16c with 32-bit offsets, without the per-load range walk (fewer instructions between the loads, so
// a warp's loads leave sooner).
template <int Threads, int Unroll, int MinBlocks, bool Hint, bool Lean>
__global__ void __launch_bounds__(Threads, MinBlocks)
stream_ranges(const __grid_constant__ Ranges ranges, uint4* __restrict__ dst, long long dst_chunks,
              unsigned* __restrict__ sink) {
  write_marks(dst, dst_chunks);
  unsigned acc = loose_sum(ranges);
  const Share share = share_of(ranges);
  Cursor at(ranges, share.lo);
  if (Lean && share.hi <= at.end && share.hi - share.lo <= 0xffffffffll) {  // (an empty share too: n = 0)
    const unsigned long long base = at.origin + 16ull * static_cast<unsigned long long>(share.lo);
    acc += sum_chunks<Threads, Unroll, Hint>(0u, static_cast<unsigned>(share.hi - share.lo),
                                             [&](unsigned i) { return base + 16ull * i; });
  } else {
    acc += sum_chunks<Threads, Unroll, Hint>(share.lo, share.hi,
                                             [&](long long c) { return at.address(ranges, c); });
  }
  store_checksum(acc, sink);
}

constexpr int kBulkThreads = 512;
constexpr int kBulkStages = 4;
constexpr int kBulkStageChunks = (32 << 10) / 16;       // 32 KB a stage: 128 KB in flight per SM
constexpr int kBulkSmem = kBulkStages * kBulkStageChunks * 16;

#if FIB_PROBE_BULK_DEVICE
// Thread 0: chunks [first, last) of the share into one stage, one bulk copy per range they touch (bodies are
// 16-byte aligned and whole chunks, as cp.async.bulk needs); the stage's barrier expects all of their bytes.
__device__ __forceinline__ void issue_stage(const Ranges& ranges, Cursor& at, long long first, long long last,
                                            uint32_t stage, uint32_t bar) {
  sm90::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(16 * (last - first)));
  for (long long c = first; c < last;) {
    const unsigned long long src = at.address(ranges, c);
    const long long stop = last < at.end ? last : at.end;
    sm90::bulk_load(stage + static_cast<uint32_t>(16 * (c - first)), reinterpret_cast<const void*>(src),
                    static_cast<uint32_t>(16 * (stop - c)), bar);
    c = stop;
  }
}
#endif

// The ranges through TMA bulk copies into a shared-memory ring (see the top of the file). Step k of the share
// fills stage k % kBulkStages; a stage is refilled only after every thread summed it (the __syncthreads).
__global__ void __launch_bounds__(kBulkThreads, 1)
stream_bulk(const __grid_constant__ Ranges ranges, uint4* __restrict__ dst, long long dst_chunks,
            unsigned* __restrict__ sink) {
#if FIB_PROBE_BULK_DEVICE
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ __align__(8) uint64_t full[kBulkStages];
  const Share share = share_of(ranges);
  const long long steps = (share.hi - share.lo + kBulkStageChunks - 1) / kBulkStageChunks;
  const auto stage_at = [&](long long k) { return sm90::smem_u32(ring + (k % kBulkStages) * kBulkStageChunks); };
  const auto bar_at = [&](long long k) { return sm90::smem_u32(full + k % kBulkStages); };
  const auto chunks_at = [&](long long k) {  // step k's chunks: [lo + k * stage, that + chunks_at(k))
    const long long left = share.hi - share.lo - k * kBulkStageChunks;
    return left < kBulkStageChunks ? left : kBulkStageChunks;
  };
  Cursor at(ranges, share.lo);  // thread 0's, the only one that issues
  if (threadIdx.x == 0) {
    for (int s = 0; s < kBulkStages; ++s) sm90::mbar_init(sm90::smem_u32(full + s), 1);
    sm90::mbar_fence_init();
    for (long long k = 0; k < steps && k < kBulkStages; ++k) {
      const long long first = share.lo + k * kBulkStageChunks;
      issue_stage(ranges, at, first, first + chunks_at(k), stage_at(k), bar_at(k));
    }
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them

  write_marks(dst, dst_chunks);
  unsigned acc = loose_sum(ranges);
  for (long long k = 0; k < steps; ++k) {
    sm90::mbar_wait(bar_at(k), static_cast<uint32_t>((k / kBulkStages) & 1));
    const uint4* data = ring + (k % kBulkStages) * kBulkStageChunks;
    const int n = static_cast<int>(chunks_at(k));
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += kBulkThreads) acc += sum4(data[i]);
    __syncthreads();  // every thread is done with the stage before thread 0 refills it
    if (threadIdx.x == 0 && k + kBulkStages < steps) {
      const long long first = share.lo + (k + kBulkStages) * kBulkStageChunks;
      issue_stage(ranges, at, first, first + chunks_at(k + kBulkStages), stage_at(k), bar_at(k));
    }
  }
  store_checksum(acc, sink);
#endif
}

// ---- the pieces path ---------------------------------------------------------------------------------------------
// The table is sorted by size class (probe.class_sorted): class k holds the pieces of 2^(k-1) < chunks <= 2^k
// 16-byte chunks (class 0: one chunk, or a head or tail of < 16 bytes). A "job" is 2^shift[k] consecutive pieces
// of one class, so a job's piece and slot follow from its index by shifts alone: no per-job table to read, only
// these few words in the parameters (the constant bank). Jobs are numbered class after class.
struct PieceTable {
  const unsigned long long* pieces;   // set by the launch from the table tensor
  long long n;                        // pieces in the table
  long long job_end[kClasses];        // jobs of classes 0..k (prefix sums)
  long long first[kClasses + 1];      // class k: pieces [first[k], first[k + 1]) of the table; first[kClasses] = n
  long long shift[kClasses];          // a job of class k: up to 2^shift[k] pieces (the class's last job may be short)
};

struct Job {
  int k;                              // its class
  long long first, end;               // its pieces [first, end)
};

// Job j's class (a few uniform compares against the parameters) and pieces.
__host__ __device__ __forceinline__ Job job_at(const PieceTable& t, long long j) {
  int k = 0;
#pragma unroll
  for (int c = 0; c < kClasses - 1; ++c) k += j >= t.job_end[c];
  const long long first = t.first[k] + ((j - (k ? t.job_end[k - 1] : 0)) << t.shift[k]);
  const long long cap = first + (1ll << t.shift[k]);
  return {k, first, cap < t.first[k + 1] ? cap : t.first[k + 1]};
}

__device__ __forceinline__ unsigned long long piece_at(const unsigned long long* __restrict__ pieces, long long i,
                                                       long long n) {
  return i < n ? __ldg(pieces + i) : 0ull;  // 0 = an empty piece
}

__device__ __forceinline__ const char* piece_base(unsigned long long piece) {
  return reinterpret_cast<const char*>(piece & kAddressMask);
}

// A piece shorter than 16 bytes (at most 3 words; never both kinds in one piece): its words, as one lane reads them.
__device__ __forceinline__ uint4 piece_words(unsigned long long piece) {
  const unsigned* w = reinterpret_cast<const unsigned*>(piece_base(piece));
  const unsigned n = static_cast<unsigned>(piece >> 48) & 3u;
  return make_uint4(n > 0 ? __ldg(w) : 0u, n > 1 ? __ldg(w + 1) : 0u, n > 2 ? __ldg(w + 2) : 0u, 0u);
}

// "pieces": one warp per piece in any table order; each warp takes kGroup pieces per step, so a lane has
// kGroup * kChunksPerLane 16-byte loads in flight, and it fetches the next step's piece words while those loads
// are outstanding. Pieces much shorter than 2 KB leave most of a lane's load slots empty.
__global__ void __launch_bounds__(kThreads, 4)
stream_pieces(const __grid_constant__ PieceTable t, uint4* __restrict__ dst, long long dst_chunks,
              unsigned* __restrict__ sink) {
  const int lane = threadIdx.x & 31;
  const long long warp = global_thread() >> 5;
  const long long warps = (gridDim.x * static_cast<long long>(kThreads)) >> 5;
  const long long n_pieces = t.n;

  write_marks(dst, dst_chunks);

  unsigned acc = 0;
  unsigned long long next[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) next[g] = piece_at(t.pieces, warp + g * warps, n_pieces);

  for (long long first = warp; first < n_pieces; first += kGroup * warps) {
    uint4 v[kGroup][kChunksPerLane];
    unsigned word[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const char* base = piece_base(next[g]);
      const unsigned words = static_cast<unsigned>(next[g] >> 48);
      const unsigned chunks = words >> 2;
#pragma unroll
      for (int j = 0; j < kChunksPerLane; ++j) {
        const unsigned c = lane + 32 * j;
        v[g][j] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(base) + c) : make_uint4(0u, 0u, 0u, 0u);
      }
      // A piece shorter than 16 bytes: at most 3 words, one per lane (never both kinds in one piece).
      const unsigned rest = words & 3u;
      word[g] = static_cast<unsigned>(lane) < rest ? __ldg(reinterpret_cast<const unsigned*>(base + 16 * chunks) + lane)
                                                   : 0u;
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) next[g] = piece_at(t.pieces, first + (kGroup + g) * warps, n_pieces);
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
#pragma unroll
      for (int j = 0; j < kChunksPerLane; ++j) acc += sum4(v[g][j]);
      acc += word[g];
    }
  }
  store_checksum(acc, sink);
}

// "classed": a job is kJobSlots 16-byte slots (4 per lane, 2 KB) filled by pieces of one class: slot s holds
// chunk s % 2^k of the job's piece s / 2^k, so a warp step moves 2 KB whether the pieces are 2 KB, 1 KB (2 a job)
// or 128 B (16 a job, 8 lanes each: one 128-byte line per lane group). A lane has kJobsPerStep jobs, 8 loads, in
// flight, and fetches the next step's piece words (one per slot, mostly the same word: L1 hits) meanwhile.
// Slots past a piece's end (a piece shorter than its class) or past the class's end stay empty.
struct Slots {
  int k;
  unsigned long long word[kChunksPerLane];
};

__device__ __forceinline__ Slots slots_at(const PieceTable& t, int j, int jobs, int lane) {
  Slots out{0, {0ull, 0ull, 0ull, 0ull}};
  if (j < jobs) {
    const Job job = job_at(t, j);
    out.k = job.k;
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      const long long p = job.first + ((lane + 32 * i) >> job.k);
      out.word[i] = p < job.end ? __ldg(t.pieces + p) : 0ull;
    }
  }
  return out;
}

template <bool Hint>
__device__ __forceinline__ uint4 slot_load(unsigned long long piece, unsigned chunk) {
  const unsigned words = static_cast<unsigned>(piece >> 48);
  if (chunk < (words >> 2)) return load16<Hint>((piece & kAddressMask) + 16ull * chunk);
  return chunk == 0 ? piece_words(piece) : make_uint4(0u, 0u, 0u, 0u);  // words: class 0 only, chunk 0
}

template <bool Hint>
__global__ void __launch_bounds__(kThreads, 4)
stream_classed(const __grid_constant__ PieceTable t, uint4* __restrict__ dst, long long dst_chunks,
               unsigned* __restrict__ sink) {
  const int lane = threadIdx.x & 31;
  // Job indices in 32 bits (2^31 jobs are 4 TB): fewer registers beside the 8 loads' 32 and the next words' 16.
  const int warp = static_cast<int>(global_thread() >> 5);
  const int warps = gridDim.x * (kThreads / 32);
  const int jobs = static_cast<int>(t.job_end[kClasses - 1]);

  write_marks(dst, dst_chunks);

  unsigned acc = 0;
  Slots next[kJobsPerStep];
#pragma unroll
  for (int g = 0; g < kJobsPerStep; ++g) next[g] = slots_at(t, warp + g * warps, jobs, lane);

  for (int first = warp; first < jobs; first += kJobsPerStep * warps) {
    uint4 v[kJobsPerStep][kChunksPerLane];
#pragma unroll
    for (int g = 0; g < kJobsPerStep; ++g) {
      const unsigned mask = (1u << next[g].k) - 1u;
#pragma unroll
      for (int i = 0; i < kChunksPerLane; ++i) v[g][i] = slot_load<Hint>(next[g].word[i], (lane + 32 * i) & mask);
    }
#pragma unroll
    for (int g = 0; g < kJobsPerStep; ++g) next[g] = slots_at(t, first + (kJobsPerStep + g) * warps, jobs, lane);
#pragma unroll
    for (int g = 0; g < kJobsPerStep; ++g)
#pragma unroll
      for (int i = 0; i < kChunksPerLane; ++i) acc += sum4(v[g][i]);
  }
  store_checksum(acc, sink);
}

// "pieces_bulk": every warp on its own, with a private ring of kBulkPieceStages shared-memory stages of
// kBulkJobBytes each, one job per stage (up to 128 pieces of one class, at most 16 KB): each lane issues one
// cp.async.bulk (TMA) per piece of its 4, straight into the stage at the warp's prefix sum of their sizes, so a
// 128-byte piece costs one instruction, not 8 lanes' loads, and the bytes in flight (192 KB an SM, more than a
// 19 MB plan needs over 132 SMs) are bounded by shared memory, not registers. The stage's mbarrier expects the
// job's bytes; once it lands the warp sums the stage (the checksum) and refills it with its next job. Pieces of
// < 16 bytes (not bulk-copyable) are read as words at issue time.
constexpr int kBulkPieceWarps = 4;
constexpr int kBulkPieceStages = 3;
constexpr int kBulkJobBytes = 16 << 10;
constexpr int kBulkPieceSmem = kBulkPieceWarps * kBulkPieceStages * kBulkJobBytes;  // 192 KB: 1 CTA per SM

#if FIB_PROBE_BULK_DEVICE
// This lane's 4 pieces of job j (pieces first + lane + 32q), or empty ones past the job (or past the last job).
__device__ __forceinline__ void job_words(const PieceTable& t, long long j, long long jobs, int lane,
                                          unsigned long long (&word)[4]) {
  const Job job = j < jobs ? job_at(t, j) : Job{0, 0, 0};
#pragma unroll
  for (int q = 0; q < 4; ++q) word[q] = piece_at(t.pieces, job.first + lane + 32 * q, job.end);
}

// Issues one job into the stage at `stage` (shared address) completing on `bar`; returns its bytes in the stage.
__device__ __forceinline__ unsigned issue_job(const unsigned long long (&word)[4], int lane, uint32_t stage,
                                              uint32_t bar, unsigned& acc) {
  unsigned bytes[4], mine = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    bytes[q] = 16u * (static_cast<unsigned>(word[q] >> 50));  // whole 16-byte chunks: (words >> 2) * 16
    mine += bytes[q];
  }
  unsigned end = mine;  // inclusive prefix sum over the lanes: this lane's pieces end at `end` in the stage
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned before = __shfl_up_sync(0xffffffffu, end, offset);
    if (lane >= offset) end += before;
  }
  const unsigned total = __shfl_sync(0xffffffffu, end, 31);
  if (lane == 0) sm90::mbar_arrive_expect_tx(bar, total);  // announced before any copy can complete on it
  __syncwarp();
  unsigned at = end - mine;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (bytes[q]) sm90::bulk_load(stage + at, piece_base(word[q]), bytes[q], bar);
    at += bytes[q];
    acc += sum4(piece_words(word[q]));  // heads and tails (< 16 B); zero for body pieces
  }
  return total;
}
#endif

__global__ void __launch_bounds__(kBulkPieceWarps * 32, 1)
stream_pieces_bulk(const __grid_constant__ PieceTable t, uint4* __restrict__ dst, long long dst_chunks,
                   unsigned* __restrict__ sink) {
#if FIB_PROBE_BULK_DEVICE
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ __align__(8) uint64_t full[kBulkPieceWarps * kBulkPieceStages];
  constexpr int kStageChunks = kBulkJobBytes / 16;
  const int lane = threadIdx.x & 31;
  const int w = threadIdx.x >> 5;
  const long long warp = global_thread() >> 5;
  const long long warps = gridDim.x * static_cast<long long>(kBulkPieceWarps);
  const long long jobs = t.job_end[kClasses - 1];
  const uint4* mine = ring + w * kBulkPieceStages * kStageChunks;  // this warp's stages
  const auto stage_at = [&](int s) { return sm90::smem_u32(mine + s * kStageChunks); };
  const auto bar_at = [&](int s) { return sm90::smem_u32(full + w * kBulkPieceStages + s); };
  if (threadIdx.x == 0) {
    for (int b = 0; b < kBulkPieceWarps * kBulkPieceStages; ++b) sm90::mbar_init(sm90::smem_u32(full + b), 1);
    sm90::mbar_fence_init();
  }
  // This warp's t-th job is warp + t * warps (interleaved over the grid), in stage t % kBulkPieceStages. Its piece
  // words are fetched a ring ahead: those of the first ring all at once, then each right after its stage's issue.
  unsigned long long word[kBulkPieceStages][4];
#pragma unroll
  for (int s = 0; s < kBulkPieceStages; ++s) job_words(t, warp + s * warps, jobs, lane, word[s]);
  __syncthreads();  // the barriers are initialised before anyone issues on or waits on them

  write_marks(dst, dst_chunks);
  unsigned acc = 0;
  unsigned bytes[kBulkPieceStages];
#pragma unroll
  for (int s = 0; s < kBulkPieceStages; ++s) {
    const long long j = warp + s * warps;
    bytes[s] = j < jobs ? issue_job(word[s], lane, stage_at(s), bar_at(s), acc) : 0u;
    job_words(t, j + kBulkPieceStages * warps, jobs, lane, word[s]);
  }
  for (long long round = 0;; ++round) {
#pragma unroll
    for (int s = 0; s < kBulkPieceStages; ++s) {
      const long long j = warp + (round * kBulkPieceStages + s) * warps;
      if (j >= jobs) {  // every job issued before this one was summed: nothing is in flight into the ring
        store_checksum(acc, sink);
        return;
      }
      sm90::mbar_wait(bar_at(s), static_cast<uint32_t>(round & 1));
      const uint4* data = mine + s * kStageChunks;
      const int n = static_cast<int>(bytes[s] / 16);
#pragma unroll 4
      for (int i = lane; i < n; i += 32) acc += sum4(data[i]);
      __syncwarp();                // every lane is done reading the stage ...
      sm90::fence_proxy_async();   // ... before the async proxy (TMA) writes it again
      const long long again = j + kBulkPieceStages * warps;
      bytes[s] = again < jobs ? issue_job(word[s], lane, stage_at(s), bar_at(s), acc) : 0u;
      job_words(t, again + kBulkPieceStages * warps, jobs, lane, word[s]);
    }
  }
#endif
}

// The ranges-path kernels, in probe.VARIANTS order. `per_thread`: body chunks one thread takes per step (what
// sizes the grid for small plans); `smem`: dynamic shared memory; `major`: the compute capability it needs.
using RangesKernel = void (*)(Ranges, uint4*, long long, unsigned*);
struct Variant {
  const char* name;
  RangesKernel kernel;  // null: not built here
  int threads, per_thread, smem, major;
};
const Variant kVariants[] = {
    {"ranges", stream_ranges<256, 8, 4, false, false>, 256, 8, 0, 0},
    {"lean", stream_ranges<256, 8, 4, false, true>, 256, 8, 0, 0},
    {"wide", stream_ranges<512, 16, 1, false, true>, 512, 16, 0, 0},
    {"hint", stream_ranges<256, 8, 4, true, true>, 256, 8, 0, 0},
    {"bulk", FIB_PROBE_BULK ? stream_bulk : nullptr, kBulkThreads, kBulkStages * kBulkStageChunks / kBulkThreads,
     kBulkSmem, 9},
};
constexpr int kNumVariants = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));

// Whether a kernel is built here and can run on the current device (bulk copies need sm_90).
bool usable(const void* kernel, int smem, int major) {
  if (kernel == nullptr) return false;
  int device = 0, have = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&have, cudaDevAttrComputeCapabilityMajor, device);
  if (have < major) return false;
  // Dynamic shared memory over 48 KB must be allowed per device and function: here, before every occupancy
  // query and launch (a host-side call, outside the kernel's span).
  return smem == 0 ||
         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) == cudaSuccess;
}

// The ranges variant, if it can run here.
const Variant* runnable(int variant) {
  if (variant < 0 || variant >= kNumVariants) return nullptr;
  const Variant* v = &kVariants[variant];
  return usable(reinterpret_cast<const void*>(v->kernel), v->smem, v->major) ? v : nullptr;
}

// The pieces-path kernels, in probe.PIECE_VARIANTS order, all reading one class-sorted table. `job_bytes`: the
// job size their PieceTable's shifts are computed for (0: one warp per piece, no jobs); `per_warp`: pieces
// ("pieces") or jobs one warp takes per step (what sizes the grid for small plans).
using PiecesKernel = void (*)(PieceTable, uint4*, long long, unsigned*);
struct PieceVariant {
  const char* name;
  PiecesKernel kernel;  // null: not built here
  int threads, job_bytes, per_warp, smem, major;
};
const PieceVariant kPieceVariants[] = {
    {"pieces", stream_pieces, kThreads, 0, kGroup, 0, 0},
    {"classed", stream_classed<false>, kThreads, kJobSlots * 16, kJobsPerStep, 0, 0},
    {"classed_hint", stream_classed<true>, kThreads, kJobSlots * 16, kJobsPerStep, 0, 0},
    {"pieces_bulk", FIB_PROBE_BULK ? stream_pieces_bulk : nullptr, kBulkPieceWarps * 32, kBulkJobBytes, 1,
     kBulkPieceSmem, 9},
};
constexpr int kNumPieceVariants = static_cast<int>(sizeof(kPieceVariants) / sizeof(kPieceVariants[0]));

const PieceVariant* runnable_pieces(int variant) {
  if (variant < 0 || variant >= kNumPieceVariants) return nullptr;
  const PieceVariant* v = &kPieceVariants[variant];
  return usable(reinterpret_cast<const void*>(v->kernel), v->smem, v->major) ? v : nullptr;
}

// A table's parameters as probe.piece_params packs them for this variant: classes back to back, each class's
// jobs those of its shift (the shift the variant's job size gives: min(7, log2(job_bytes / 16) - k)).
bool valid_table(const PieceTable& t, const PieceVariant& v) {
  if (t.n < 0 || t.first[0] != 0 || t.first[kClasses] != t.n) return false;
  long long jobs = 0;
  for (int k = 0; k < kClasses; ++k) {
    const long long count = t.first[k + 1] - t.first[k];
    int shift = 0;
    while (v.job_bytes > 0 && (16ll << (shift + k + 1)) <= v.job_bytes && shift < 7) ++shift;
    if (count < 0 || t.shift[k] != shift) return false;
    jobs += (count + (1ll << shift) - 1) >> shift;
    if (t.job_end[k] != jobs) return false;
  }
  return jobs <= (1ll << 30);  // stream_classed counts jobs in 32 bits, with look-ahead of a few grids
}

// CTAs for a kernel that needs `threads` threads: every SM at full residency, fewer when the work is smaller
// (never fewer than one per SM).
long long grid_for(const void* kernel, int block, int smem, long long threads) {
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, smem);
  long long blocks = (threads + block - 1) / block;
  const long long full = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  if (blocks > full) blocks = full;
  if (blocks < sms) blocks = sms;
  return blocks;
}

long long at_least(long long a, long long b) { return a > b ? a : b; }

}  // namespace

extern "C" int fib_probe_piece_bytes() { return kPieceBytes; }

extern "C" int fib_probe_max_ranges() { return kMaxRanges; }

extern "C" int fib_probe_ranges_bytes() { return static_cast<int>(sizeof(Ranges)); }

extern "C" int fib_probe_variants() { return kNumVariants; }

extern "C" const char* fib_probe_variant_name(int variant) {
  return variant >= 0 && variant < kNumVariants ? kVariants[variant].name : "";
}

// Threads per CTA of a ranges variant; 0 when it cannot run here.
extern "C" int fib_probe_variant_threads(int variant) {
  const Variant* v = runnable(variant);
  return v ? v->threads : 0;
}

// Ranges: one lane per `per_thread` body chunks, per loose piece or per output chunk, whichever needs more;
// 0 when the variant cannot run here.
extern "C" int fib_probe_range_blocks(int variant, long long chunks, long long n_loose, long long dst_chunks) {
  const Variant* v = runnable(variant);
  if (v == nullptr) return 0;
  const long long threads = at_least(at_least((chunks + v->per_thread - 1) / v->per_thread, n_loose), dst_chunks);
  return static_cast<int>(grid_for(reinterpret_cast<const void*>(v->kernel), v->threads, v->smem, threads));
}

// `params`: fib_probe_ranges_bytes() bytes from probe.pack_ranges (host memory, copied into the launch).
extern "C" cudaError_t fib_probe_launch_ranges(int variant, const void* params, void* dst, long long dst_chunks,
                                               unsigned* sink, int blocks, cudaStream_t stream) {
  const Variant* v = runnable(variant);
  if (v == nullptr) return cudaErrorNotSupported;
  Ranges ranges;
  std::memcpy(&ranges, params, sizeof(Ranges));
  if (ranges.n < 0 || ranges.n > kMaxRanges || ranges.n_loose < 0 || ranges.n_loose > 2 * kMaxRanges ||
      (ranges.chunks > 0 && (ranges.n == 0 || ranges.end[ranges.n - 1] != ranges.chunks)) ||
      static_cast<long long>(blocks) * v->threads < ranges.n_loose)  // one thread per loose piece
    return cudaErrorInvalidValue;
  uint4* out = static_cast<uint4*>(dst);
  void* args[] = {&ranges, &out, &dst_chunks, &sink};
  return cudaLaunchKernel(reinterpret_cast<const void*>(v->kernel), dim3(blocks), dim3(v->threads), args,
                          static_cast<size_t>(v->smem), stream);
}

extern "C" int fib_probe_piece_variants() { return kNumPieceVariants; }

extern "C" const char* fib_probe_piece_variant_name(int variant) {
  return variant >= 0 && variant < kNumPieceVariants ? kPieceVariants[variant].name : "";
}

// Threads per CTA of a pieces variant; 0 when it cannot run here.
extern "C" int fib_probe_piece_variant_threads(int variant) {
  const PieceVariant* v = runnable_pieces(variant);
  return v ? v->threads : 0;
}

extern "C" int fib_probe_piece_job_bytes(int variant) {
  return variant >= 0 && variant < kNumPieceVariants ? kPieceVariants[variant].job_bytes : -1;
}

extern "C" int fib_probe_piece_table_bytes() { return static_cast<int>(sizeof(PieceTable)); }

// Pieces: one warp per `per_warp` pieces or jobs, or one lane per output chunk, whichever needs more; 0 when the
// variant cannot run here or the parameters are not a valid table for it.
extern "C" int fib_probe_piece_blocks(int variant, const void* params, long long dst_chunks) {
  const PieceVariant* v = runnable_pieces(variant);
  PieceTable t;
  std::memcpy(&t, params, sizeof(PieceTable));
  if (v == nullptr || !valid_table(t, *v)) return 0;
  const long long units = v->job_bytes ? t.job_end[kClasses - 1] : t.n;
  const long long warps = at_least((units + v->per_warp - 1) / v->per_warp, (dst_chunks + 31) / 32);
  return static_cast<int>(grid_for(reinterpret_cast<const void*>(v->kernel), v->threads, v->smem, warps * 32));
}

// `params`: fib_probe_piece_table_bytes() bytes from probe.piece_params (host memory, copied into the launch);
// `pieces`: the class-sorted device table they describe (n entries).
extern "C" cudaError_t fib_probe_launch_pieces(int variant, const unsigned long long* pieces, long long n_pieces,
                                               const void* params, void* dst, long long dst_chunks, unsigned* sink,
                                               int blocks, cudaStream_t stream) {
  const PieceVariant* v = runnable_pieces(variant);
  if (v == nullptr) return cudaErrorNotSupported;
  PieceTable t;
  std::memcpy(&t, params, sizeof(PieceTable));
  t.pieces = pieces;
  if (!valid_table(t, *v) || t.n != n_pieces) return cudaErrorInvalidValue;
  uint4* out = static_cast<uint4*>(dst);
  void* args[] = {&t, &out, &dst_chunks, &sink};
  return cudaLaunchKernel(reinterpret_cast<const void*>(v->kernel), dim3(blocks), dim3(v->threads), args,
                          static_cast<size_t>(v->smem), stream);
}

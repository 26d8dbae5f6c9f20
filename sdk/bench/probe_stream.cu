// The probe kernels of sdk/bench/probe.py: read every byte the plan names exactly once (a byte named twice is
// read twice) and write the output bytes, doing no work besides a checksum that keeps the loads from being
// optimised away. Both kernels write the same output marks and the same per-warp checksum words.
//
// Two ways to name the bytes:
//  * stream_ranges, for plans of at most kMaxRanges ranges (after merging touching ones): the ranges ride in the
//    kernel's parameters (__grid_constant__, the constant bank), so the first data load depends on no global
//    load. The 16-byte chunks of all range bodies form one index space, split evenly over the CTAs; a chunk's
//    range is found by walking the parameter prefix sums, and each lane has kUnroll 16-byte loads in flight.
//    Range heads and tails (< 16 bytes) are "loose" pieces in the parameters, read as 4-byte words.
//  * stream_pieces, for gathered plans (many rows): a device table of pieces, one 64-bit word each: the address
//    in bits 0..47, the length in 4-byte words in bits 48..63. The host splits ranges so that a piece of 16 bytes
//    or more starts 16-byte aligned, is a multiple of 16 bytes and at most kPieceBytes long; shorter pieces
//    (range heads and tails) are read as 4-byte words. One warp per piece; each warp takes kGroup pieces per step,
//    so a lane has kGroup * kChunksPerLane 16-byte loads in flight, and it fetches the next step's piece words
//    while those loads are outstanding.
// Shape of both: a persistent grid (every SM, as many CTAs as fit). The output stores are issued first: they are
// posted, so the write stream overlaps the read stream.
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kPieceBytes = 2048;                        // must match PIECE_BYTES in probe.py
constexpr int kChunksPerLane = kPieceBytes / (32 * 16);  // 4
constexpr int kGroup = 2;
constexpr int kMaxRanges = 96;                           // must match MAX_RANGES in probe.py
constexpr int kUnroll = 8;                               // 16-byte loads per lane in flight (ranges kernel)
constexpr unsigned long long kAddressMask = (1ull << 48) - 1;

// The parameters of stream_ranges, laid out word for word as probe.pack_ranges writes them.
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

// Output chunk i gets the word i first (what the tests check); grid-strided, before any load is issued.
__device__ __forceinline__ void write_marks(uint4* __restrict__ dst, long long dst_chunks) {
  const long long threads = gridDim.x * static_cast<long long>(kThreads);
  for (long long i = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x; i < dst_chunks; i += threads)
    dst[i] = make_uint4(static_cast<unsigned>(i), 0u, 0u, 0u);
}

// One checksum word per warp of the grid: the sum of every word its lanes read (mod 2^32).
__device__ __forceinline__ void store_checksum(unsigned acc, unsigned* __restrict__ sink) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) sink[(blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x) >> 5] = acc;
}

__device__ __forceinline__ unsigned long long piece_at(const unsigned long long* __restrict__ pieces, long long i,
                                                       long long n) {
  return i < n ? __ldg(pieces + i) : 0ull;  // 0 = an empty piece
}

__global__ void __launch_bounds__(kThreads, 4)
stream_ranges(const __grid_constant__ Ranges ranges, uint4* __restrict__ dst, long long dst_chunks,
              unsigned* __restrict__ sink) {
  write_marks(dst, dst_chunks);

  // Heads and tails first (one loose piece per thread of the grid, at most 3 words): their loads are in flight
  // while the bodies stream, and their sum is only needed at the end.
  const long long thread = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x;
  unsigned acc = 0;
  if (thread < ranges.n_loose) {
    const unsigned long long piece = ranges.loose[thread];
    const unsigned* words = reinterpret_cast<const unsigned*>(piece & kAddressMask);
    const unsigned n = static_cast<unsigned>(piece >> 48);
#pragma unroll
    for (unsigned w = 0; w < 3; ++w) acc += w < n ? __ldg(words + w) : 0u;
  }

  // This CTA's share of the chunk index space, and the range its first chunk lies in (a binary search over the
  // prefix sums, uniform across the CTA: counts the ranges that end at or before lo).
  const long long lo = ranges.chunks * blockIdx.x / gridDim.x;
  const long long hi = ranges.chunks * (blockIdx.x + 1) / gridDim.x;
  int r = 0;
  for (int step = 128; step > 0; step >>= 1)
    if (r + step <= ranges.n && ranges.end[r + step - 1] <= lo) r += step;
  long long range_end = lo < hi ? ranges.end[r] : 0;
  unsigned long long origin = lo < hi ? ranges.origin[r] : 0ull;

  // A lane's chunks only grow, so its range only moves forward (rarely: ranges are long next to a tile).
  for (long long first = lo + threadIdx.x; first < hi; first += kThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long c = first + u * kThreads;
      v[u] = make_uint4(0u, 0u, 0u, 0u);
      if (c < hi) {
        while (c >= range_end) {  // c < chunks = end[n - 1]: stops at a valid range
          ++r;
          range_end = ranges.end[r];
          origin = ranges.origin[r];
        }
        v[u] = __ldg(reinterpret_cast<const uint4*>(origin + 16ull * static_cast<unsigned long long>(c)));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  store_checksum(acc, sink);
}

__global__ void __launch_bounds__(kThreads, 4)
stream_pieces(const unsigned long long* __restrict__ pieces, long long n_pieces, uint4* __restrict__ dst,
              long long dst_chunks, unsigned* __restrict__ sink) {
  const int lane = threadIdx.x & 31;
  const long long thread = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x;
  const long long threads = gridDim.x * static_cast<long long>(kThreads);
  const long long warp = thread >> 5;
  const long long warps = threads >> 5;

  write_marks(dst, dst_chunks);

  unsigned acc = 0;
  unsigned long long next[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) next[g] = piece_at(pieces, warp + g * warps, n_pieces);

  for (long long first = warp; first < n_pieces; first += kGroup * warps) {
    uint4 v[kGroup][kChunksPerLane];
    unsigned word[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const char* base = reinterpret_cast<const char*>(next[g] & kAddressMask);
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
    for (int g = 0; g < kGroup; ++g) next[g] = piece_at(pieces, first + (kGroup + g) * warps, n_pieces);
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
#pragma unroll
      for (int j = 0; j < kChunksPerLane; ++j) acc += v[g][j].x + v[g][j].y + v[g][j].z + v[g][j].w;
      acc += word[g];
    }
  }
  store_checksum(acc, sink);
}

// CTAs for a kernel that needs `threads` threads: every SM at full residency, fewer when the work is smaller
// (never fewer than one per SM).
long long grid_for(const void* kernel, long long threads) {
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  long long blocks = (threads + kThreads - 1) / kThreads;
  const long long full = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  if (blocks > full) blocks = full;
  if (blocks < sms) blocks = sms;
  return blocks;
}

long long at_least(long long a, long long b) { return a > b ? a : b; }

}  // namespace

extern "C" int fib_probe_threads_per_block() { return kThreads; }

extern "C" int fib_probe_piece_bytes() { return kPieceBytes; }

extern "C" int fib_probe_max_ranges() { return kMaxRanges; }

extern "C" int fib_probe_ranges_bytes() { return static_cast<int>(sizeof(Ranges)); }

// Pieces: one warp per kGroup pieces, or one lane per output chunk, whichever needs more.
extern "C" int fib_probe_blocks(long long n_pieces, long long dst_chunks) {
  const long long warps = at_least((n_pieces + kGroup - 1) / kGroup, (dst_chunks + 31) / 32);
  return static_cast<int>(grid_for(reinterpret_cast<const void*>(stream_pieces), warps * 32));
}

// Ranges: one lane per kUnroll body chunks, per loose piece or per output chunk, whichever needs more.
extern "C" int fib_probe_range_blocks(long long chunks, long long n_loose, long long dst_chunks) {
  const long long threads = at_least(at_least((chunks + kUnroll - 1) / kUnroll, n_loose), dst_chunks);
  return static_cast<int>(grid_for(reinterpret_cast<const void*>(stream_ranges), threads));
}

extern "C" cudaError_t fib_probe_launch(const unsigned long long* pieces, long long n_pieces, void* dst,
                                        long long dst_chunks, unsigned* sink, int blocks, cudaStream_t stream) {
  stream_pieces<<<blocks, kThreads, 0, stream>>>(pieces, n_pieces, static_cast<uint4*>(dst), dst_chunks, sink);
  return cudaGetLastError();
}

// `params`: fib_probe_ranges_bytes() bytes from probe.pack_ranges (host memory, copied into the launch).
extern "C" cudaError_t fib_probe_launch_ranges(const void* params, void* dst, long long dst_chunks, unsigned* sink,
                                               int blocks, cudaStream_t stream) {
  Ranges ranges;
  std::memcpy(&ranges, params, sizeof(Ranges));
  if (ranges.n < 0 || ranges.n > kMaxRanges || ranges.n_loose < 0 || ranges.n_loose > 2 * kMaxRanges ||
      (ranges.chunks > 0 && (ranges.n == 0 || ranges.end[ranges.n - 1] != ranges.chunks)))
    return cudaErrorInvalidValue;
  stream_ranges<<<blocks, kThreads, 0, stream>>>(ranges, static_cast<uint4*>(dst), dst_chunks, sink);
  return cudaGetLastError();
}

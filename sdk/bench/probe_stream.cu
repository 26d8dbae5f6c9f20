// The probe kernel of sdk/bench/probe.py: reads every byte named by a piece list exactly once and writes the
// output bytes, doing no work besides a checksum that keeps the loads from being optimised away.
//
// A piece is one 64-bit word: its address in bits 0..47, its length in 4-byte words in bits 48..63. The host
// splits ranges so that a piece of 16 bytes or more starts 16-byte aligned, is a multiple of 16 bytes and at most
// kPieceBytes long; shorter pieces (range heads and tails) are read as 4-byte words.
//
// Shape of the work: a persistent grid (every SM, as many CTAs as fit) and one warp per piece; each warp takes
// kGroup pieces per step, so a lane has kGroup * kChunksPerLane 16-byte loads in flight, and it fetches the next
// step's piece words while those loads are outstanding. The output stores are issued first: they are posted, so
// the write stream overlaps the read stream.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kPieceBytes = 2048;                        // must match PIECE_BYTES in probe.py
constexpr int kChunksPerLane = kPieceBytes / (32 * 16);  // 4
constexpr int kGroup = 2;
constexpr unsigned long long kAddressMask = (1ull << 48) - 1;

__device__ __forceinline__ unsigned long long piece_at(const unsigned long long* __restrict__ pieces, long long i,
                                                       long long n) {
  return i < n ? __ldg(pieces + i) : 0ull;  // 0 = an empty piece
}

__global__ void __launch_bounds__(kThreads, 4)
stream_pieces(const unsigned long long* __restrict__ pieces, long long n_pieces, uint4* __restrict__ dst,
              long long dst_chunks, unsigned* __restrict__ sink) {
  const int lane = threadIdx.x & 31;
  const long long thread = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x;
  const long long threads = gridDim.x * static_cast<long long>(kThreads);
  const long long warp = thread >> 5;
  const long long warps = threads >> 5;

  for (long long i = thread; i < dst_chunks; i += threads) dst[i] = make_uint4(static_cast<unsigned>(i), 0u, 0u, 0u);

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

#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane == 0) sink[warp] = acc;
}

}  // namespace

extern "C" int fib_probe_threads_per_block() { return kThreads; }

extern "C" int fib_probe_piece_bytes() { return kPieceBytes; }

// CTAs for one launch: every SM at full residency, fewer when the work is smaller (never fewer than one per SM).
extern "C" int fib_probe_blocks(long long n_pieces, long long dst_chunks) {
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stream_pieces, kThreads, 0);
  const long long warps_per_block = kThreads / 32;
  long long warps = (n_pieces + kGroup - 1) / kGroup;
  const long long store_warps = (dst_chunks + 31) / 32;
  if (store_warps > warps) warps = store_warps;
  long long blocks = (warps + warps_per_block - 1) / warps_per_block;
  const long long full = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  if (blocks > full) blocks = full;
  if (blocks < sms) blocks = sms;
  return static_cast<int>(blocks);
}

extern "C" cudaError_t fib_probe_launch(const unsigned long long* pieces, long long n_pieces, void* dst,
                                        long long dst_chunks, unsigned* sink, int blocks, cudaStream_t stream) {
  stream_pieces<<<blocks, kThreads, 0, stream>>>(pieces, n_pieces, static_cast<uint4*>(dst), dst_chunks, sink);
  return cudaGetLastError();
}

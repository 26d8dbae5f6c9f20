// FP8 block-scaled grouped GEMMs on Hopper's tensor-core pipeline (TMA -> smem ring -> wgmma), for the MoE.
//
// Problem (per group g = local expert): rows offsets[g] .. offsets[g] + counts[g] - 1 of A (the permuted
// activations of that expert's assignments, contiguous, K-major e4m3) times B_g^T (B_g = [n][K] e4m3 weights,
// K-major), with scale_a[kb][row] (one f32 per row and 128-wide K block; MN-major like the definition's
// hidden_states_scale) and scale_b[g][n/128][kb] (one f32 per 128 x 128 weight block).
//
// Kernel structure (grouped_gemm_kernel):
//  * Persistent CTAs; "units" = (group, m-tile of BM = 64 x consumers rows, n-unit) numbered group-major, then
//    n-unit, m-tile fastest, so the CTAs running at once share one expert's weight tiles and activation rows in
//    L2. Every CTA builds the same unit table from counts/offsets in shared memory (no host synchronisation).
//  * One producer warpgroup (one thread issues everything; with two consumers, setmaxnreg drops it to 40 registers
//    and raises the consumers to 232): per 128-wide K block a TMA box of A (BM x 128 B), of B (BN x 128 B; both
//    128-byte swizzle) and of scale_a (BM + 4 f32 from row0 rounded down to 4: TMA's innermost start coordinate
//    must be 16-byte aligned, an unaligned one is an illegal instruction) into one stage of a STAGES-deep ring,
//    completing that stage's "full" mbarrier by transaction bytes. kGatherA (GEMM1 without a gather kernel): A by
//    one 1-row box per valid row of the tile from the tokens' own rows, issued by BM / 32 producer warps (a lane
//    each), which also write scale_a into the stage.
//  * Consumer warpgroups (1 or 2), each owning 64 rows of the tile: wait "full", read the two scale_a values of
//    its rows, issue 4 x wgmma m64nBNk32 (fresh partial sum), wait for them, release
//    the stage ("empty": one arrival per consumer warp), then promote: acc += partial * scale_a * scale_b. The
//    promotion per K block (a second f32 accumulator) is what production FP8 block-scale kernels do: the scales
//    change every 128 of K, and the tensor core's own f32 accumulation of FP8 products is not full fp32.
//  * Out-of-range rows: TMA zero-fills rows past A's last row; rows of the next group inside a tile (kGatherA:
//    stale shared memory, they are not loaded) are computed and never stored. So groups need no padding or
//    alignment.
//
// Epilogues:
//  * kSwiGluFp8 (GEMM1): B = W1_g with rows [x1 (n/2 rows) | x2 (n/2 rows)]; a unit owns 128 intermediate
//    columns j0..j0+127 and runs two passes (x1/x2 rows j0..j0+63, then j0+64..j0+127), each a 64+64 row B tile,
//    so every thread holds x1 and x2 of the same columns: out = silu(x2) * x1 (the definition's order: SiLU gates
//    the SECOND half). Pass 0's 32 results per thread wait in registers; after pass 1 each row's amax over the 128
//    columns (4 lanes share a row) gives the per-(row, 128) scale = amax / 448 and the e4m3 values; out_scale is
//    written MN-major [n/256][ld] so GEMM2 reads it exactly like hidden_states_scale.
//  * kBf16RowWeight (GEMM2): out[row] = bf16(acc * row_weight[row]) (the routing weight), one row per assignment
//    for a deterministic combine afterwards.
//  * kF32: out = acc (f32), for checking the main loop alone.
//
// Also gather_rows_kernel: A rows (and their scales) in expert order from the token-ordered activations, since a
// TMA tile cannot gather rows.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "moe_api.h"
#include "moe_common.cuh"
#include "sm90_ptx.cuh"
#include "sm90_store.cuh"

namespace fused_moe {
namespace wg {

enum class Epi : int { kF32 = 0, kBf16RowWeight = 1, kSwiGluFp8 = 2 };

constexpr int kMaxGroups = 32;  // one warp builds the unit table

struct GemmArgs {
  const int* counts;        // [num_groups] rows of each group (device)
  const int* offsets;       // [num_groups] first row of each group in A and in `out` (device)
  int num_groups;           // 1 .. 32
  int n;                    // B rows per group (GEMM N); kSwiGluFp8: 2 x intermediate, [x1 | x2]
  int k_blocks;             // K / 128
  const float* sfb;         // [num_groups][n / 128][k_blocks] weight block scales
  void* out;                // [rows][ldo]: f32 (kF32), bf16 (kBf16RowWeight), e4m3 bytes (kSwiGluFp8, n/2 cols)
  int ldo;                  // elements
  float* out_scale;         // kSwiGluFp8: [n / 256][out_scale_ld]
  int out_scale_ld;
  const float* row_weight;  // kBf16RowWeight: [rows], or null for 1
  // Split-K (swap-AB kernel only): f32 partial sums [splits][rows of all groups][n] (kSwiGluFp8: x1 | x2 columns,
  // kBf16RowWeight: already times row_weight), or null = never split; splits x rows never exceeds partial_rows.
  float* partial;
  int partial_rows;
  int* splits_out;  // the split factor used (written by CTA 0) for the kernels after this one, or null
  // swap-AB SwiGLU with splits: one arrival counter per unit, zero on entry; the last split of a unit to finish
  // adds the partial sums up and runs the epilogue (no extra launch). Null: GEMM1 never splits.
  int* unit_done;
  // hi + lo intermediate (swap-AB path): GEMM1 also writes e4m3(16 x residual) `lo_rows` rows below each output
  // row, GEMM2 (two token boxes) reads it there and adds it with weight 1/16. 0 = hi only.
  int lo_rows;
  // swap-AB: 1 = counts / offsets / row_weight are final before pdl_wait (GroupedGemm::early_weights): the weight
  // boxes of the first ring stages are issued before the wait, only the activations (A, scale_a) wait for it.
  int early_weights;
  // Row tiles with kGatherA: row r of the (permuted) A is row row_token[r] of the tensor map's rows (the tokens'
  // own activations), loaded one 128-byte TMA row at a time, and its scales are row_scale[kb * row_scale_ld +
  // row_token[r]] (the tokens' own [K / 128][T] scales). Else null.
  const int* row_token;
  const float* row_scale;
  int row_scale_ld;
};

// e4m3 of a (already divided by its block scale), and e4m3(16 x the rounding residual): hi + lo / 16 carries about
// 8 mantissa bits instead of 3 (the FP8 intermediate's rounding is most of its error against the fp32 reference).
// Per-(row, 128 columns) requantisation scale of the intermediate: amax / 448, never below 1e-30 so that 1 / scale
// stays finite for a tiny nonzero amax (448 / 1e-37 overflows to inf, and 0 * inf is NaN); an all-zero block gets
// values 0 under that scale.
struct BlockScale {
  float scale, inv;
};
__device__ __forceinline__ BlockScale e4m3_block_scale(float amax) {
  const float scale = fmaxf(amax * (1.0f / 448.0f), 1e-30f);
  return {scale, 1.0f / scale};
}

__device__ __forceinline__ uint8_t e4m3_hi_lo(float a, uint8_t& lo) {
  const uint16_t hi = sm90::pack_e4m3x2(a, 0.0f);
  lo = static_cast<uint8_t>(sm90::pack_e4m3x2(16.0f * (a - sm90::unpack_e4m3x2(hi).x), 0.0f) & 0xFFu);
  return static_cast<uint8_t>(hi & 0xFFu);
}

// Split-K factor of a swap-AB GEMM with `units` output tiles of `k_blocks` K blocks on `ctas` persistent CTAs: the
// S in 1..kMaxSplits with the fewest waves x (K blocks per split + 2), the 2 standing for a unit's fixed cost
// (pipeline fill, epilogue), the smallest such S on a tie; at least 2 K blocks per split and S x rows <=
// partial_rows (S = 1 always qualifies). A pure function of the routed counts, evaluated on the device: the host
// never learns them. Collective over each aligned group of 8 lanes (lane l weighs S = l % 8 + 1, all at once: the
// serial loop's integer divisions cost ~0.75 us of a call's critical path); every lane of a group gets its
// group's S, so two groups can choose for two GEMMs in one go.
__device__ __forceinline__ int choose_splits(int units, int rows, int ctas, int k_blocks, int partial_rows) {
  static_assert(kMaxSplits >= 1 && kMaxSplits <= 8, "one lane of an 8-lane group per candidate S");
  const int s = (threadIdx.x & 7) + 1;
  const bool allowed = s == 1 || (s <= kMaxSplits && s * rows <= partial_rows && 2 * s <= k_blocks);
  const uint32_t cost = static_cast<uint32_t>((units * s + ctas - 1) / ctas * ((k_blocks + s - 1) / s + 2));
  uint32_t key = allowed ? (cost << 3) | static_cast<uint32_t>(s - 1) : 0xffffffffu;  // fewest cost, then smallest S
#pragma unroll
  for (int off = 4; off >= 1; off >>= 1) key = min(key, __shfl_xor_sync(0xffffffffu, key, off));
  return static_cast<int>(key & 7u) + 1;
}

template <int kConsumers, int kBN, int kStages, Epi kEpi, bool kGatherA = false>
struct WgConfig {
  static constexpr int kBM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr bool kSwiGlu = kEpi == Epi::kSwiGluFp8;
  static constexpr int kPasses = kSwiGlu ? 256 / kBN : 1;  // B tiles per unit (SwiGLU: 128 x1 + 128 x2 rows)
  static constexpr int kUnitCols = kSwiGlu ? 128 : kBN;    // output columns per unit
  static constexpr int kBoxB = kSwiGlu ? kBN / 2 : kBN;    // rows per TMA box of B
  // kBN = 256 ("wide"): each consumer warpgroup runs its 64 x 256 tile as two m64n128 halves per K block, each
  // promoted as soon as it completes, so only one half's fresh partial sum is live (64 registers) beside the 128
  // accumulators. Why wide: every K block moves A (16 KB) and B (32 KB) for twice the FLOPs of a 128-wide tile's
  // 16 + 16 KB, a quarter less L2 -> shared memory traffic per FLOP (128-wide tiles at large T run at 0.6-0.9 of
  // the FP8 rate while DeepGEMM-class kernels reach ~0.85-0.95 with wider tiles).
  static constexpr int kWgN = kBN < 128 ? kBN : 128;       // N of one wgmma group
  static constexpr int kHalves = kBN / kWgN;
  static constexpr int kPart = kWgN / 2;                   // f32 partial sums per consumer thread
  static constexpr int kABytes = kBM * 128;
  static constexpr int kBBytes = kBN * 128;
  // scale_a box: TMA needs the innermost start coordinate 16-byte aligned, so the box starts at row0 rounded down to
  // 4 floats and holds 4 more; the consumers index it at (row0 % 4) + row.
  static constexpr int kSfaBox = kBM + 4;
  static constexpr int kSfaBytes = kSfaBox * 4;
  // The weight scales ride in the ring as well: per stage, the 16-byte chunk of sfb holding the K block's scale of
  // the tile's x columns and (kTwoScales) of its y columns, right after scale_a. Read by the consumers from global
  // memory instead, a scale missing L2 (the weight stream evicts them) stalls the promotion of a unit's first block
  // for an HBM round trip with both warpgroups idle: a unit of GEMM2 is only 16 blocks.
  static constexpr bool kTwoScales = kSwiGlu || kBN > 128;
  static constexpr int kSfbOff = (kSfaBytes + 15) / 16 * 16;
  static constexpr int kSfbBytes = kTwoScales ? 32 : 16;
  static constexpr int kSfaPitch = (kSfbOff + kSfbBytes + 127) / 128 * 128;
  static constexpr uint32_t kTxBytes = kABytes + kBBytes + kSfaBytes + kSfbBytes;
  static constexpr int kOffA = 0;  // every A / B stage starts 1024-byte aligned (128 B swizzle atom)
  static constexpr int kOffB = kOffA + kStages * kABytes;
  static constexpr int kOffSfa = kOffB + kStages * kBBytes;
  static constexpr int kOffBar = kOffSfa + kStages * kSfaPitch;  // full[kStages], empty[kStages] (8 B each)
  static constexpr int kOffTable = kOffBar + 2 * kStages * 8;   // int before[33], count[32], offset[32]
  // kBf16RowWeight: a 16-row x 64-column bf16 slab per consumer warp, through which its stores pass (store_bf16).
  static constexpr int kSlabBytes = 16 * 64 * 2;
  static constexpr int kOffSlab = (kOffTable + 97 * 4 + 127) / 128 * 128;
  static constexpr int kSlabs = kEpi == Epi::kBf16RowWeight ? 4 * kConsumers : 0;
  static constexpr int kSmem = kOffSlab + kSlabs * kSlabBytes + 1024;  // + slack to align the dynamic base to 1024
  // Two consumer warpgroups need more than the 168 registers a 384-thread launch gives each thread: the producer
  // drops to 40 and the consumers rise to 232 (2 x 128 x 232 + 128 x 40 = 64512 <= 65536). With one consumer
  // warpgroup the launch already allows 255 per thread, so there is nothing to move.
  static constexpr bool kRegSplit = kConsumers == 2;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  // kGatherA: the producer warps that load A's rows (one row per lane) and arrive on "full".
  static constexpr int kGatherWarps = kGatherA ? kBM / 32 : 0;
  static constexpr int kFullArrivals = kGatherA ? kGatherWarps : 1;
  static constexpr int kAcc = kBN / 2;  // f32 accumulators per consumer thread (m64 x kBN per warpgroup)

  static_assert(kConsumers == 1 || kConsumers == 2, "one or two consumer warpgroups");
  static_assert(kSwiGlu ? (kBN == 128 || kBN == 256) : (kBN == 64 || kBN == 128 || kBN == 256),
                "BN: 128 / 256 for SwiGLU (x1 + x2 halves), else 64 / 128 / 256");
  static_assert(kStages >= 2, "pipeline depth");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "swizzle atoms");
  static_assert(kSmem <= 227 * 1024, "shared memory budget (227 KB per CTA)");
  static_assert(kConsumers * 128 * kConsumerRegs + 128 * kProducerRegs <= 65536, "register file");
};

struct Unit {
  int group, nu;   // group, n-unit (kUnitCols output columns)
  int row0, rows;  // first row of the m-tile, valid rows in it (<= BM)
};

// counts / offsets / row weights: written by an earlier kernel (global: through L2, ld.cg, since with early_weights
// they are read before this grid's pdl_wait) or, in the one-pass kernel, built in shared memory, where ld.global
// would fault (cudaErrorInvalidAddressSpace).
template <class T>
__device__ __forceinline__ T load_l2_or_shared(const T* p) {
  return __isShared(p) ? *p : __ldcg(p);
}

// Warp 0, lane = group (lanes >= num_groups: cnt = off = 0): table[0..32] = units before group g (inclusive scan),
// [33..64] counts, [65..96] offsets.
__device__ __forceinline__ void write_unit_table(int cnt, int off, int bm, int n_units, int* table) {
  const int lane = threadIdx.x & 31;
  int v = (cnt + bm - 1) / bm * n_units;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += o;
  }
  table[lane + 1] = v;
  if (lane == 0) table[0] = 0;
  table[33 + lane] = cnt;
  table[65 + lane] = off;
}

// The same from the GEMM's counts / offsets.
__device__ __forceinline__ void build_unit_table(const GemmArgs& a, int bm, int n_units, int* table) {
  const int lane = threadIdx.x & 31;
  const bool live = lane < a.num_groups;
  write_unit_table(live ? load_l2_or_shared(a.counts + lane) : 0, live ? load_l2_or_shared(a.offsets + lane) : 0,
                   bm, n_units, table);
}

// Unit u's group: the largest g with table[g] <= u (empty groups before it share its start), by bisection over the
// 32 groups: 5 dependent shared-memory loads on the path from one unit to the next, instead of up to 32.
__device__ __forceinline__ Unit unit_at(const int* table, int u, int bm) {
  static_assert(kMaxGroups == 32, "a 5-step bisection");
  int g = 0;
#pragma unroll
  for (int step = 16; step >= 1; step >>= 1)
    if (table[g + step] <= u) g += step;
  const int r = u - table[g], cnt = table[33 + g];
  const int mtiles = (cnt + bm - 1) / bm;
  Unit t;
  t.group = g;
  t.nu = r / mtiles;
  const int m0 = (r % mtiles) * bm;
  t.row0 = table[65 + g] + m0;
  t.rows = min(bm, cnt - m0);
  return t;
}

// Weight-scale rows of a unit's pass ([k_blocks] f32 each, sfb = [groups][n / 128][k_blocks]): x = the tile's (first)
// columns; y = SwiGLU's x2 half, or a plain wide tile's second 128 columns (the next scale block); else y = x.
struct SfbRows {
  const float* x;
  const float* y;
};
template <class C>
__device__ __forceinline__ SfbRows sfb_rows(const GemmArgs& a, const Unit& t, int pass) {
  const int col_b = t.nu * C::kUnitCols + pass * C::kBoxB, nblk = a.n / 128;
  const float* x = a.sfb + (static_cast<size_t>(t.group) * nblk + col_b / 128) * a.k_blocks;
  if constexpr (C::kSwiGlu)
    return {x, a.sfb + (static_cast<size_t>(t.group) * nblk + (col_b + a.n / 2) / 128) * a.k_blocks};
  return {x, C::kTwoScales ? x + a.k_blocks : x};
}

// The 16-byte aligned chunk holding *p (a bulk copy moves whole 16-byte chunks), and p's f32 index in it.
__device__ __forceinline__ const void* chunk16(const float* p) {
  return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) & ~static_cast<uintptr_t>(15));
}
__device__ __forceinline__ int chunk16_index(const float* p) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(p) >> 2) & 3);
}

// Issues the weight-scale chunks of K block kb into the stage's scale slot `sf` (kSfbBytes more on `full`).
template <class C>
__device__ __forceinline__ void load_sfb(uint32_t sf, const SfbRows& r, int kb, uint32_t full) {
  sm90::bulk_load(sf + C::kSfbOff, chunk16(r.x + kb), 16, full);
  if constexpr (C::kTwoScales) sm90::bulk_load(sf + C::kSfbOff + 16, chunk16(r.y + kb), 16, full);
}

__device__ __forceinline__ float silu_mul(float gate, float up) {
  // Reference expression: x2 / (1 + exp(-x2)) * x1 (gate = x2, up = x1).
  return __fdividef(gate, 1.0f + __expf(-gate)) * up;
}

// ------------------------------------------------------------------------------------------------------------------
// kGatherA: A's rows are gathered by the producer warps (GemmArgs::row_token), one 1-row TMA box per valid row of
// the tile, and their scales by plain loads that the lanes write into the stage's scale_a slots (where a TMA box
// would put them), instead of boxes of a permuted copy: no gather kernel before GEMM1 and no copy of the
// activations through HBM. A tile's rows past its group's last row are then not loaded (stale shared memory: their
// accumulator rows are never stored), so the stage expects t.rows rows of A and no scale bytes.
template <int kConsumers, int kBN, int kStages, Epi kEpi, bool kGatherA = false>
__global__ void __launch_bounds__(128 * (kConsumers + 1), 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_sfa,
                        const __grid_constant__ CUtensorMap tm_b, const GemmArgs args) {
  using C = WgConfig<kConsumers, kBN, kStages, kEpi, kGatherA>;
  extern __shared__ uint8_t smem_raw[];
  // TMA's 128 B swizzle and the wgmma descriptors assume 1024-byte aligned tiles: align the base by hand.
  const uint32_t raw = sm90::smem_u32(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  const uint32_t base = sm90::smem_u32(smem);
  int* table = reinterpret_cast<int*>(smem + C::kOffTable);
  const uint32_t full0 = base + C::kOffBar, empty0 = full0 + 8 * kStages;
  const int tid = threadIdx.x, wgi = tid / 128;
  const int n_units = C::kSwiGlu ? args.n / 2 / 128 : args.n / kBN;

  if (tid == kConsumers * 128) {
    sm90::tma_prefetch_desc(&tm_a);
    sm90::tma_prefetch_desc(&tm_sfa);
    sm90::tma_prefetch_desc(&tm_b);
#pragma unroll 1
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(full0 + 8 * s, C::kFullArrivals);     // the producer's arrive.expect_tx (+ gatherers')
      sm90::mbar_init(empty0 + 8 * s, 4 * kConsumers);      // lane 0 of every consumer warp
    }
    sm90::mbar_fence_init();
  }
  sm90::pdl_wait();  // counts / offsets / A come from the previous kernel
  sm90::pdl_launch_dependents();  // every CTA is resident (one per SM): the next kernel may queue behind them
  if (tid < 32) build_unit_table(args, C::kBM, n_units, table);
  if (tid == 0 && blockIdx.x == 0 && args.splits_out != nullptr) *args.splits_out = 1;  // this kernel never splits
  __syncthreads();
  const int units = table[32];

  if (wgi == kConsumers) {
    // ---------------------------------------------------------------- producer
    if constexpr (C::kRegSplit) sm90::setmaxnreg_dec<C::kProducerRegs>();
    if constexpr (kGatherA) {
      // Warp w of the producer warpgroup loads tile rows 32 w + lane: one 1-row box each (a per-lane TMA
      // coordinate is issued lane by lane, so the rows are spread over C::kGatherWarps warps), and writes their
      // scales into the stage's scale_a slots before its arrive on "full" (one arrive per gathering warp; warp
      // 0's also announces the stage's bytes and issues the weight boxes).
      const int warp = (tid / 32) % 4, lane = tid % 32, r = 32 * warp + lane;
      if (warp >= C::kGatherWarps) return;
      uint32_t stage = 0, phase = 0;
#pragma unroll 1
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        const Unit t = unit_at(table, u, C::kBM);
        // This lane's row's source (-1: past the group's last row, not loaded) and its scale of the next K block
        // to issue, loaded one block ahead (an L2 round trip per block would pace the producer).
        const int tok = r < t.rows ? args.row_token[t.row0 + r] : -1;
        float scale = tok >= 0 ? __ldg(args.row_scale + tok) : 0.0f;
        const uint32_t tx = C::kBBytes + t.rows * 128 + C::kSfbBytes;  // no scale_a box: the lanes write it
#pragma unroll 1
        for (int pass = 0; pass < C::kPasses; ++pass) {
          const int b_row = t.group * args.n + t.nu * C::kUnitCols + pass * C::kBoxB;
          const SfbRows sr = sfb_rows<C>(args, t, pass);
#pragma unroll 1
          for (int kb = 0; kb < args.k_blocks; ++kb) {
            const uint32_t full = full0 + 8 * stage;
            if (lane == 0) sm90::mbar_wait(empty0 + 8 * stage, phase ^ 1);
            __syncwarp();  // the stage is free: its rows and scale slots may be overwritten
            if (tok >= 0) {
              sm90::tma_load_2d(base + C::kOffA + stage * C::kABytes + r * 128, &tm_a, full, kb * 128, tok);
              reinterpret_cast<float*>(smem + C::kOffSfa + stage * C::kSfaPitch)[(t.row0 & 3) + r] = scale;
              // the next block's (after the pass's last block: block 0, for the next pass)
              const int nkb = kb + 1 < args.k_blocks ? kb + 1 : 0;
              scale = __ldg(args.row_scale + static_cast<size_t>(nkb) * args.row_scale_ld + tok);
            }
            __syncwarp();  // this warp's slots are written before its arrive releases them
            if (lane == 0) {
              if (warp == 0) {
                // A row may complete before this announcement (the transaction count may dip below zero); the
                // phase cannot complete before every gathering warp has arrived.
                sm90::mbar_arrive_expect_tx(full, tx);
                load_sfb<C>(base + C::kOffSfa + stage * C::kSfaPitch, sr, kb, full);
                const uint32_t b_dst = base + C::kOffB + stage * C::kBBytes;
                sm90::tma_load_2d(b_dst, &tm_b, full, kb * 128, b_row);
                if constexpr (C::kSwiGlu)
                  sm90::tma_load_2d(b_dst + C::kBoxB * 128, &tm_b, full, kb * 128, b_row + args.n / 2);
              } else {
                sm90::mbar_arrive(full);
              }
            }
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
        }
      }
      return;
    }
    if (tid != kConsumers * 128) return;  // one thread issues everything
    uint32_t stage = 0, phase = 0;
#pragma unroll 1
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const Unit t = unit_at(table, u, C::kBM);
#pragma unroll 1
      for (int pass = 0; pass < C::kPasses; ++pass) {
        // Row of B's first box in the [num_groups * n][K] view (SwiGLU: x1 rows; x2 rows are n/2 further).
        const int b_row = t.group * args.n + t.nu * C::kUnitCols + pass * C::kBoxB;
        const SfbRows sr = sfb_rows<C>(args, t, pass);
#pragma unroll 1
        for (int kb = 0; kb < args.k_blocks; ++kb) {
          sm90::mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t full = full0 + 8 * stage, sf = base + C::kOffSfa + stage * C::kSfaPitch;
          sm90::mbar_arrive_expect_tx(full, C::kTxBytes);
          sm90::tma_load_2d(base + C::kOffA + stage * C::kABytes, &tm_a, full, kb * 128, t.row0);
          sm90::tma_load_2d(sf, &tm_sfa, full, t.row0 & ~3, kb);
          load_sfb<C>(sf, sr, kb, full);
          const uint32_t b_dst = base + C::kOffB + stage * C::kBBytes;
          sm90::tma_load_2d(b_dst, &tm_b, full, kb * 128, b_row);
          if constexpr (C::kSwiGlu)
            sm90::tma_load_2d(b_dst + C::kBoxB * 128, &tm_b, full, kb * 128, b_row + args.n / 2);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  if constexpr (C::kRegSplit) sm90::setmaxnreg_inc<C::kConsumerRegs>();
  const int warp = (tid / 32) % 4, lane = tid % 32, quad = lane % 4;
  const int my_row = wgi * 64 + warp * 16 + lane / 4;  // this thread's first tile row; the second is +8
  uint32_t stage = 0, phase = 0;
  float held[C::kSwiGlu ? 32 : 1];  // SwiGLU pass-0 results (8 column groups x 2 rows x 2 columns)
  (void)held;
  // GEMM2's bf16 epilogue is deferred: a unit's accumulators wait in `acc` and are stored while the next
  // unit's first K block runs on the tensor cores (GEMM2's units are only 16 K blocks long, so a store phase with
  // the tensor cores idle costs about a tenth of the unit). `pending` is that unit (its sums already weighted).
  constexpr bool kDefer = kEpi == Epi::kBf16RowWeight;
  float acc[C::kAcc];
  Unit pending{0, 0, 0, 0};
  bool has_pending = false;
  auto store_f32 = [&](const Unit& t) {  // kF32: the fragments as they are
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = my_row + 8 * h;
      if (row >= t.rows) continue;
      float* dst = static_cast<float*>(args.out) + static_cast<size_t>(t.row0 + row) * args.ldo + t.nu * kBN + 2 * quad;
#pragma unroll
      for (int i = 0; i < C::kAcc / 4; ++i)
        *reinterpret_cast<float2*>(dst + 8 * i) = make_float2(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
    }
  };
  // GEMM2's bf16 rows, 64 columns at a time through this warp's slab: stmatrix lays the accumulator fragments
  // (4 bytes per thread per row, 16 bytes of each of 8 rows per warp instruction) out as 128-byte rows, read back
  // 16 bytes per lane, so each warp store writes 4 whole 128-byte lines: a quarter of the store instructions and
  // half the sectors of storing the fragments directly. 16-byte chunk g of slab row r sits at chunk g ^ (r % 8),
  // so neither side has bank conflicts.
  auto store_bf16 = [&](const Unit& t) {
    const uint32_t slab = base + C::kOffSlab + (wgi * 4 + warp) * C::kSlabBytes;
    const int m = lane / 8, srow = lane % 8 + 8 * (m & 1);  // stmatrix: lane's row address, of matrix m
    // Read side: lane reads chunk lane % 8 of slab rows lane / 8 + 4 j (j = 0..3); (lane / 8 + 4 j) % 8 is
    // lane / 8 + 4 (j % 2). Addresses are recomputed per store: few registers stay live beside two tiles' sums.
    const int rrow = lane / 8, rg = lane % 8;
#pragma unroll
    for (int c = 0; c < kBN / 64; ++c) {
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const int i = 8 * c + 2 * p;  // column groups i (matrices 0, 1: rows 0-7, 8-15) and i + 1 (2, 3)
        const uint32_t r[4] = {pack_bf16x2(acc[4 * i], acc[4 * i + 1]), pack_bf16x2(acc[4 * i + 2], acc[4 * i + 3]),
                               pack_bf16x2(acc[4 * i + 4], acc[4 * i + 5]), pack_bf16x2(acc[4 * i + 6], acc[4 * i + 7])};
        sm90::stmatrix_x4(r, slab + srow * 128 + (((2 * p + (m >> 1)) ^ (srow & 7)) << 4));
      }
      __syncwarp();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = rrow + 4 * j, tile_row = wgi * 64 + warp * 16 + row;
        const uint4 v = *reinterpret_cast<const uint4*>(smem + (slab - base) + row * 128 + ((rg ^ rrow ^ 4 * (j % 2)) << 4));
        if (tile_row < t.rows)
          *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(args.out) +
                                    static_cast<size_t>(t.row0 + tile_row) * args.ldo + t.nu * kBN + 64 * c + 8 * rg) = v;
      }
      __syncwarp();  // the slab is read before the next chunk overwrites it
    }
  };
  // Wide SwiGLU (one pass): x1 of the unit's 128 columns in acc[0 .. 63], x2 in acc[64 .. 127]; column group i
  // (0..15) is columns 8 i + 2 quad + 0 / 1, rows my_row (j = 0, 1) and my_row + 8 (j = 2, 3).
  auto store_swiglu_wide = [&](const Unit& t) {
    if constexpr (C::kSwiGlu && C::kPasses == 1) {
      float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        acc[i] = silu_mul(acc[64 + i], acc[i]);
        if ((i & 3) < 2) m0 = fmaxf(m0, fabsf(acc[i]));
        else m1 = fmaxf(m1, fabsf(acc[i]));
      }
#pragma unroll
      for (int d = 1; d <= 2; d <<= 1) {
        m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, d));
        m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, d));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = my_row + 8 * h;
        const BlockScale bs = e4m3_block_scale(h == 0 ? m0 : m1);
        if (row >= t.rows) continue;
        uint8_t* dst = static_cast<uint8_t*>(args.out) + static_cast<size_t>(t.row0 + row) * args.ldo +
                       t.nu * 128 + 2 * quad;
#pragma unroll
        for (int i = 0; i < 16; ++i)
          *reinterpret_cast<uint16_t*>(dst + 8 * i) =
              sm90::pack_e4m3x2(acc[4 * i + 2 * h] * bs.inv, acc[4 * i + 2 * h + 1] * bs.inv);
        if (quad == 0) args.out_scale[static_cast<size_t>(t.nu) * args.out_scale_ld + t.row0 + row] = bs.scale;
      }
    }
  };

#pragma unroll 1
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const Unit t = unit_at(table, u, C::kBM);
#pragma unroll 1
    for (int pass = 0; pass < C::kPasses; ++pass) {
      // Where block kb's weight scales sit in the stage's chunks (the producer copies the chunks holding them).
      const SfbRows sr = sfb_rows<C>(args, t, pass);
      const int ix = chunk16_index(sr.x), iy = chunk16_index(sr.y);

      float part[C::kPart];  // K block kb's fresh sum (of one half); kb = 0 sets acc, later blocks add to it
      // The routing weights of this thread's two rows, loaded now: the epilogue would otherwise wait an L2 round
      // trip for them with the tensor cores idle (GEMM2's units are only 16 K blocks long).
      float row_w[2] = {1.0f, 1.0f};
      if constexpr (kEpi == Epi::kBf16RowWeight) {
        if (args.row_weight != nullptr) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (my_row + 8 * h < t.rows) row_w[h] = args.row_weight[t.row0 + my_row + 8 * h];
        }
      }

#pragma unroll 1
      for (int kb = 0; kb < args.k_blocks; ++kb) {
        sm90::mbar_wait(full0 + 8 * stage, phase);
        const uint8_t* sf = smem + C::kOffSfa + stage * C::kSfaPitch;
        const float* sfa = reinterpret_cast<const float*>(sf) + (t.row0 & 3);
        const float* sfs = reinterpret_cast<const float*>(sf + C::kSfbOff);
        // read before the stage is released
        const float a0 = sfa[my_row], a1 = sfa[my_row + 8], sx = sfs[(ix + kb) & 3];
        const float sy = C::kTwoScales ? sfs[4 + ((iy + kb) & 3)] : sx;
        const uint64_t da = sm90::desc_k_sw128(base + C::kOffA + stage * C::kABytes + wgi * 64 * 128);
        const float s0x = a0 * sx, s1x = a1 * sx, s0y = a0 * sy, s1y = a1 * sy;
#pragma unroll
        for (int hv = 0; hv < C::kHalves; ++hv) {
          const uint64_t db = sm90::desc_k_sw128(base + C::kOffB + stage * C::kBBytes + hv * C::kWgN * 128);
          sm90::fence_regs(part);
          // The previous unit's stores: while this block's MMAs run, except in a wide tile, where the two
          // tiles' sums and the stores' addresses would not fit the registers (spills in the K loop).
          constexpr bool kStoreUnderMma = C::kHalves == 1;
          if constexpr (kDefer && !kStoreUnderMma) {
            if (hv == 0 && kb == 0 && has_pending) store_bf16(pending), has_pending = false;
          }
          sm90::wgmma_fence();
#pragma unroll
          for (int k = 0; k < 4; ++k) sm90::wgmma_fp8<C::kWgN>(part, da + 2 * k, db + 2 * k, k > 0);
          sm90::wgmma_commit();
          if constexpr (kDefer && kStoreUnderMma) {
            if (kb == 0 && has_pending) store_bf16(pending), has_pending = false;
          }
          sm90::wgmma_wait<0>();
          sm90::fence_regs(part);
          if (hv == C::kHalves - 1) {
            __syncwarp();  // every lane of the warp is done with the stage (its scales too)
            if (lane == 0) sm90::mbar_arrive(empty0 + 8 * stage);
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
          // part[4 i + j] is tile column hv * kWgN + 8 i + 2 quad + (j & 1); y columns: SwiGLU's second half
          // (x2), a plain tile's columns from 128 on.
          float* dst = acc + hv * C::kPart;
          if (kb == 0) {  // the unit's (pass's) first block: acc starts here (it held the pending unit until now)
#pragma unroll
            for (int i = 0; i < C::kPart / 4; ++i) {
              const int col = hv * C::kWgN + 8 * i;
              const bool y = C::kSwiGlu ? col >= kBN / 2 : col >= 128;
              dst[4 * i + 0] = part[4 * i + 0] * (y ? s0y : s0x);
              dst[4 * i + 1] = part[4 * i + 1] * (y ? s0y : s0x);
              dst[4 * i + 2] = part[4 * i + 2] * (y ? s1y : s1x);
              dst[4 * i + 3] = part[4 * i + 3] * (y ? s1y : s1x);
            }
          } else {
#pragma unroll
            for (int i = 0; i < C::kPart / 4; ++i) {
              const int col = hv * C::kWgN + 8 * i;
              const bool y = C::kSwiGlu ? col >= kBN / 2 : col >= 128;
              dst[4 * i + 0] += part[4 * i + 0] * (y ? s0y : s0x);
              dst[4 * i + 1] += part[4 * i + 1] * (y ? s0y : s0x);
              dst[4 * i + 2] += part[4 * i + 2] * (y ? s1y : s1x);
              dst[4 * i + 3] += part[4 * i + 3] * (y ? s1y : s1x);
            }
          }
        }
      }

      // ---------------------------------------------------------------- epilogue of this pass
      if constexpr (kDefer) {
        // the routing weights now, so the deferred store (with the next unit's partial sums live) only converts
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i) acc[i] *= row_w[(i / 2) % 2];
        pending = t;
        has_pending = true;
      } else if constexpr (!C::kSwiGlu) {
        store_f32(t);  // kF32 (the main loop's check): not deferred, which would spill the wide tile
      } else {
        if constexpr (C::kPasses == 1) {
          store_swiglu_wide(t);
        } else {
          // Thread's values of this pass: column groups i = 0..7 (x1 in acc[4i..], x2 in acc[4(i+8)..]).
          float cur[32];
#pragma unroll
          for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) cur[4 * i + j] = silu_mul(acc[4 * (i + 8) + j], acc[4 * i + j]);
          if (pass == 0) {
#pragma unroll
            for (int i = 0; i < 32; ++i) held[i] = cur[i];
          } else {
            // Row amax over the unit's 128 columns: 32 values here, the rest in the other 3 lanes of the quad.
            float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
              m0 = fmaxf(m0, fmaxf(fmaxf(fabsf(held[4 * i]), fabsf(held[4 * i + 1])),
                                   fmaxf(fabsf(cur[4 * i]), fabsf(cur[4 * i + 1]))));
              m1 = fmaxf(m1, fmaxf(fmaxf(fabsf(held[4 * i + 2]), fabsf(held[4 * i + 3])),
                                   fmaxf(fabsf(cur[4 * i + 2]), fabsf(cur[4 * i + 3]))));
            }
#pragma unroll
            for (int d = 1; d <= 2; d <<= 1) {
              m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, d));
              m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, d));
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = my_row + 8 * h;
              const BlockScale bs = e4m3_block_scale(h == 0 ? m0 : m1);
              const float inv = bs.inv;
              if (row >= t.rows) continue;
              uint8_t* dst = static_cast<uint8_t*>(args.out) + static_cast<size_t>(t.row0 + row) * args.ldo +
                             t.nu * 128 + 2 * quad;
#pragma unroll
              for (int i = 0; i < 8; ++i) {
                *reinterpret_cast<uint16_t*>(dst + 8 * i) =
                    sm90::pack_e4m3x2(held[4 * i + 2 * h] * inv, held[4 * i + 2 * h + 1] * inv);
                *reinterpret_cast<uint16_t*>(dst + 64 + 8 * i) =
                    sm90::pack_e4m3x2(cur[4 * i + 2 * h] * inv, cur[4 * i + 2 * h + 1] * inv);
              }
              if (quad == 0) args.out_scale[static_cast<size_t>(t.nu) * args.out_scale_ld + t.row0 + row] = bs.scale;
            }
          }
        }
      }
    }
  }
  if constexpr (kDefer) {
    if (has_pending) store_bf16(pending);
  }
}

// ------------------------------------------------------------------------------------------------------------------
// xp[r] = x[perm_tok[r]] (k_blocks * 128 bytes) and xps[kb][r] = x_scale[kb][perm_tok[r]] for the rows
// r < offsets[G-1] + counts[G-1] (groups stored in order). One CTA per row, grid-stride.
__global__ void __launch_bounds__(256) gather_rows_kernel(const uint8_t* __restrict__ x,
                                                          const float* __restrict__ x_scale, int T,
                                                          const int* __restrict__ perm_tok, const int* counts,
                                                          const int* offsets, int num_groups, int k_blocks,
                                                          uint8_t* __restrict__ xp, float* __restrict__ xps,
                                                          int xps_ld, bool trigger_early) {
  sm90::pdl_wait();
  // early_weights GEMMs read the counts before their own pdl_wait: start them only after this wait. Otherwise
  // (row tiles) the next GEMM starts when this grid exits, as before.
  if (trigger_early) sm90::pdl_launch_dependents();
  const int rows = offsets[num_groups - 1] + counts[num_groups - 1];
  const int chunks = k_blocks * 8;  // 16-byte chunks per row
#pragma unroll 1
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int tok = perm_tok[r];
    const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<size_t>(tok) * k_blocks * 128);
    uint4* dst = reinterpret_cast<uint4*>(xp + static_cast<size_t>(r) * k_blocks * 128);
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) dst[c] = __ldg(src + c);
    for (int kb = threadIdx.x; kb < k_blocks; kb += blockDim.x)
      xps[static_cast<size_t>(kb) * xps_ld + r] = __ldg(x_scale + static_cast<size_t>(kb) * T + tok);
  }
}

}  // namespace wg
}  // namespace fused_moe

// DeepSeek-V3 no-aux routing on the GPU and the per-local-expert token permutation.
//
// Routing: one warp per token, lane l owns experts 8l..8l+7, so routing group g (32 experts) is lanes 4g..4g+3.
// Ties (measure zero with random fp32 logits) resolve towards the lower index.
//
// Permutation: CTAs of 32 warps, warp e owns local expert e and walks the tokens in order with ballots, so each
// expert's token list is in token order and the result is deterministic. Outputs:
//   meta.counts/offsets            tokens per local expert, exclusive prefix (slots are expert-major)
//   perm_tok[slot], perm_w[slot]   token id and routing weight of each (token, local expert) assignment
//   slot_of[t * 8 + r]             slot of token t's r-th local expert (ascending expert id), for the combine
#pragma once

#include "moe_common.cuh"
#include "sm90_ptx.cuh"

namespace fused_moe {

struct RouteArgs {
  const float* logits;           // [T, 256]
  const __nv_bfloat16* bias;     // [256]
  int T;
  int local_offset;              // first global expert id of this rank
  float scaling;                 // routed_scaling_factor
};

// Order-preserving u32 image of a float (not NaN): a > b as floats iff key(a) > key(b) as integers; every key is > 0.
__device__ __forceinline__ uint32_t ordered_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Routes token t with the calling warp. Returns the 32-bit mask of picked local experts (same on all lanes) and
// writes the routing weight of each picked local expert to w_row[le] (other entries untouched).
__device__ __forceinline__ uint32_t route_token_warp(const RouteArgs& a, int t, float* w_row) {
  const int lane = threadIdx.x & 31;
  const float4* src = reinterpret_cast<const float4*>(a.logits + static_cast<size_t>(t) * kNumExperts) + lane * 2;
  const float4 x0 = src[0], x1 = src[1];
  const uint4 braw = reinterpret_cast<const uint4*>(a.bias)[lane];
  const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  const uint32_t bw[4] = {braw.x, braw.y, braw.z, braw.w};
  float s[8], sb[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t bits = (i & 1) ? (bw[i / 2] & 0xFFFF0000u) : (bw[i / 2] << 16);
    s[i] = 1.0f / (1.0f + expf(-x[i]));
    sb[i] = s[i] + __uint_as_float(bits);
  }
  // Group score: sum of the group's two largest biased scores (duplicates count twice, as torch.topk does).
  float m1 = -INFINITY, m2 = -INFINITY;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (sb[i] > m1) {
      m2 = m1;
      m1 = sb[i];
    } else if (sb[i] > m2) {
      m2 = sb[i];
    }
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    const float o1 = __shfl_xor_sync(0xffffffffu, m1, off), o2 = __shfl_xor_sync(0xffffffffu, m2, off);
    const float n2 = fmaxf(fminf(m1, o1), fmaxf(m2, o2));
    m1 = fmaxf(m1, o1);
    m2 = n2;
  }
  const float my_group_score = m1 + m2;
  const int my_group = lane >> 2;
  int rank = 0;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const float other = __shfl_sync(0xffffffffu, my_group_score, g * 4);
    rank += (other > my_group_score || (other == my_group_score && g < my_group)) ? 1 : 0;
  }
  const bool group_kept = rank < kTopKGroups;

  // Top-8 experts by biased score among the kept groups: 8 rounds of warp arg-max (value desc, index asc). Each
  // lane keeps its best untaken expert as an order-preserving u32 key (0: none), so a round is one redux.sync max,
  // a ballot for the lowest lane holding it (lane l owns experts 8l.., so the lowest lane is the lowest index) and,
  // off the round-to-round chain, the winner's id and score. Adding +0 first makes -0 and +0 one key, as they
  // compare equal in floats.
  uint32_t key[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) key[i] = group_kept ? ordered_key(sb[i] + 0.0f) : 0u;
  int ids[kTopK];
  float picked_s[kTopK];
#pragma unroll
  for (int r = 0; r < kTopK; ++r) {
    uint32_t bk = 0u;
    int bi = 0;
    float bs = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (key[i] > bk) {  // strict: the lower i wins a tie
        bk = key[i];
        bi = i;
        bs = s[i];
      }
    }
    const uint32_t top = __reduce_max_sync(0xffffffffu, bk);
    const int winner = __ffs(__ballot_sync(0xffffffffu, bk == top)) - 1;
    if (lane == winner) {
#pragma unroll
      for (int i = 0; i < 8; ++i) key[i] = i == bi ? 0u : key[i];
    }
    ids[r] = winner * 8 + __shfl_sync(0xffffffffu, bi, winner);
    picked_s[r] = __shfl_sync(0xffffffffu, bs, winner);
  }
  float sum = 0.0f;
#pragma unroll
  for (int r = 0; r < kTopK; ++r) sum += picked_s[r];
  const float denom = sum + 1e-20f;
  uint32_t mask = 0;
#pragma unroll
  for (int r = 0; r < kTopK; ++r) {
    const int le = ids[r] - a.local_offset;
    if (le >= 0 && le < kLocalExperts) {
      mask |= 1u << le;
      if (lane == r) w_row[le] = picked_s[r] / denom * a.scaling;
    }
  }
  return mask;
}

// Multi-CTA routing (large T): one warp per token; writes mask[t] and local_w[t * 32 + le].
template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32) route_kernel(RouteArgs a, uint32_t* __restrict__ mask,
                                                           float* __restrict__ local_w) {
  const int t = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (t >= a.T) return;
  const uint32_t m = route_token_warp(a, t, local_w + static_cast<size_t>(t) * kLocalExperts);
  if ((threadIdx.x & 31) == 0) mask[t] = m;
}

// ---- permutation (CTAs of 32 warps: warp e <-> local expert e) -----------------------------------------------

struct PermOut {
  MoeMeta* meta;
  int* perm_tok;
  float* perm_w;
  int* slot_of;  // [T * 8]
  int* zero;      // [zero_count] ints set to 0 (the grouped GEMM's split counters), or null
  int zero_count;
};

// Counts expert `e`'s tokens among masks[0..n) (smem), as seen by warp e.
__device__ __forceinline__ int count_expert(const uint32_t* masks, int n, int e) {
  const int lane = threadIdx.x & 31;
  int cnt = 0;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    const bool hit = i < n && ((masks[i] >> e) & 1u);
    cnt += __popc(__ballot_sync(0xffffffffu, hit));
  }
  return cnt;
}

// Writes expert e's assignments among tokens [t0, t0 + n) (masks in smem) from slot `pos` on.
__device__ __forceinline__ void emit_expert(const uint32_t* masks, int n, int t0, int e, int pos, const PermOut& o,
                                            const float* local_w) {
  const int lane = threadIdx.x & 31;
  for (int base = 0; base < n; base += 32) {
    const int i = base + lane;
    const uint32_t m = i < n ? masks[i] : 0u;
    const bool hit = (m >> e) & 1u;
    const uint32_t ballot = __ballot_sync(0xffffffffu, hit);
    if (hit) {
      const int slot = pos + __popc(ballot & ((1u << lane) - 1u));
      const int t = t0 + i;
      o.perm_tok[slot] = t;
      o.perm_w[slot] = local_w[static_cast<size_t>(t) * kLocalExperts + e];
      o.slot_of[t * kMaxLocalPerToken + __popc(m & ((1u << e) - 1u))] = slot;
    }
    pos += __popc(ballot);
  }
}

// Warp e (of 32, one per local expert) holds expert e's count: every warp's lane 0 stages it, warp 0 turns the 32
// counts into exclusive offsets (s_offsets) and, when `publish`, writes counts and offsets to o.meta. The caller
// syncs the CTA before it reads s_offsets.
__device__ __forceinline__ void publish_counts(int count, int e, int lane, bool publish, int* s_counts, int* s_offsets,
                                               const PermOut& o) {
  if (lane == 0) s_counts[e] = count;
  __syncthreads();
  if (threadIdx.x < 32) {
    const int c = s_counts[threadIdx.x];
    const int excl = warp_inclusive_sum(c) - c;
    s_offsets[threadIdx.x] = excl;
    if (publish) {
      o.meta->counts[threadIdx.x] = c;
      o.meta->offsets[threadIdx.x] = excl;
    }
  }
}

// ceil(T / CHUNK) CTAs; CTA c emits the assignments of tokens [c CHUNK, (c + 1) CHUNK). The first slot of its
// tokens for expert e is offsets[e] (exclusive prefix over experts of the total counts) plus e's count among the
// tokens before the chunk. Every CTA counts all T masks itself (ballots over masks staged through shared memory,
// T x 4 bytes from L2), so no CTA waits for another and slots are the same as one CTA would give: expert-major,
// token order inside an expert (deterministic). CTA 0 publishes counts and offsets.
template <int CHUNK, int STAGE>
__global__ void __launch_bounds__(1024) permute_kernel(const uint32_t* __restrict__ mask,
                                                       const float* __restrict__ local_w, int T, PermOut o) {
  static_assert(STAGE % CHUNK == 0, "a chunk never straddles two staged tiles");
  __shared__ uint32_t s_mask[STAGE];
  __shared__ int s_counts[32], s_offsets[32];
  sm90::pdl_wait();  // masks and weights come from route_kernel
  const int e = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c0 = blockIdx.x * CHUNK;
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < o.zero_count; i += 1024) o.zero[i] = 0;
  int total = 0, before = 0;
  for (int t0 = 0; t0 < T; t0 += STAGE) {
    const int n = min(STAGE, T - t0);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += 1024) s_mask[i] = mask[t0 + i];
    __syncthreads();
    if (t0 + n <= c0) {
      const int cnt = count_expert(s_mask, n, e);
      total += cnt;
      before += cnt;
    } else {
      const int head = max(0, c0 - t0);  // tokens of this tile before the chunk
      const int cnt_head = count_expert(s_mask, head, e);
      before += cnt_head;
      total += cnt_head + count_expert(s_mask + head, n - head, e);
    }
  }
  publish_counts(total, e, lane, blockIdx.x == 0, s_counts, s_offsets, o);
  const int n = min(CHUNK, T - c0);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += 1024) s_mask[i] = mask[c0 + i];
  __syncthreads();
  emit_expert(s_mask, n, c0, e, s_offsets[e] + before, o, local_w);
}

// Small T (T <= TMAX): routing and the permutation in one CTA, one launch fewer; masks and weights stay in shared
// memory (masks also go to `mask`, for the combine). Same slots as route_kernel + permute_kernel.
template <int TMAX>
__global__ void __launch_bounds__(1024) route_permute_kernel(RouteArgs a, uint32_t* __restrict__ mask, PermOut o) {
  __shared__ uint32_t s_mask[TMAX];
  __shared__ float s_w[TMAX * kLocalExperts];
  __shared__ int s_counts[32], s_offsets[32];
  for (int i = threadIdx.x; i < o.zero_count; i += 1024) o.zero[i] = 0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int t = warp; t < a.T; t += 32) {
    const uint32_t m = route_token_warp(a, t, s_w + t * kLocalExperts);
    if (lane == 0) s_mask[t] = mask[t] = m;
  }
  __syncthreads();
  publish_counts(count_expert(s_mask, a.T, warp), warp, lane, true, s_counts, s_offsets, o);
  __syncthreads();
  emit_expert(s_mask, a.T, 0, warp, s_offsets[warp], o, s_w);
}

}  // namespace fused_moe

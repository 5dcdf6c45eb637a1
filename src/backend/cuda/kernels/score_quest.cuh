// Quest's selection (quest_params, quest_expand_params): per-block upper bounds of q.k from
// the block's per-dimension min / max keys, and the token list of the picked blocks. The
// bounds are computed from K as the selection runs (one read of the range's keys, as the
// exact scorer's), not kept per page at append.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/params.h"

namespace sieve::cuda {

constexpr int quest_threads = 128;  // one warp per block at a time
constexpr int quest_max_g = 8;
constexpr int quest_max_dim = 256;

struct quest_range {
  int c0, pick_end, b0, b1;
};
__device__ __forceinline__ quest_range quest_range_of(int len, int n_queries, int sinks, int local,
                                                      int block) {
  quest_range r;
  const int n_prefix = max(len - n_queries, 0);
  r.c0 = min(sinks, n_prefix);
  r.pick_end = max(r.c0, n_prefix - local);
  r.b0 = (r.c0 + block - 1) / block;
  r.b1 = r.pick_end / block;
  return r;
}

// Grid (x: CTAs over the blocks, y: KV heads).
__global__ void __launch_bounds__(quest_threads) quest_score_kernel(const quest_params p) {
  __shared__ float s_q[quest_max_g][quest_max_dim];
  griddep_wait();
  griddep_launch_dependents();
  const int g = blockIdx.y;
  const int n_kv = p.kv.n_kv_heads, d = p.kv.head_dim, G = p.n_q_heads / n_kv;
  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q) + static_cast<int64_t>(g) * G * d;
  for (int i = threadIdx.x; i < G * d; i += quest_threads)
    s_q[i / d][i % d] = __bfloat162float(q[i]);
  __syncthreads();
  const page_table& pt = p.kv.pages;
  const int len = seq_len_of(pt, 0);
  const quest_range r = quest_range_of(len, p.n_queries, p.sinks, p.local, p.block);
  if (blockIdx.x == 0 && g == 0 && threadIdx.x == 0) *p.n_blocks = r.b1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int n_warps = quest_threads / 32;
  constexpr int per_lane = quest_max_dim / 32;
  const __nv_bfloat16* K = static_cast<const __nv_bfloat16*>(p.kv.k);
  const int first_page = pt.indptr[0];
  for (int bi = r.b0 + blockIdx.x * n_warps + warp; bi < r.b1; bi += gridDim.x * n_warps) {
    float mn[per_lane], mx[per_lane];
#pragma unroll
    for (int j = 0; j < per_lane; ++j) {
      mn[j] = INFINITY;
      mx[j] = -INFINITY;
    }
    for (int t = bi * p.block; t < (bi + 1) * p.block; ++t) {
      const int pg = t / pt.page_size, slot = t - pg * pt.page_size;
      const int64_t page = pt.indices[first_page + pg];
      const __nv_bfloat16* row = K + ((page * pt.page_size + slot) * n_kv + g) * d;
#pragma unroll
      for (int j = 0; j < per_lane; ++j) {
        const int c = lane + 32 * j;
        if (c < d) {
          const float x = __bfloat162float(row[c]);
          mn[j] = fminf(mn[j], x);
          mx[j] = fmaxf(mx[j], x);
        }
      }
    }
    float score = 0.f;
    for (int h = 0; h < G; ++h) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < per_lane; ++j) {
        const int c = lane + 32 * j;
        if (c < d) s += fmaxf(s_q[h][c] * mn[j], s_q[h][c] * mx[j]);
      }
      score += p.scale * warp_sum(s);
    }
    if (lane == 0) p.scores[static_cast<int64_t>(g) * p.score_stride + bi] = score;
  }
}

// One CTA per row.
__global__ void __launch_bounds__(256) quest_expand_kernel(const quest_expand_params p) {
  griddep_wait();
  griddep_launch_dependents();
  const int row = blockIdx.x;
  const int B = p.block;
  const quest_range r = quest_range_of(*p.seq_len, p.n_queries, p.sinks, p.local, B);
  const int n_head = max(0, min(r.pick_end, r.b0 * B) - r.c0);
  const int tail_begin = max(r.b0, r.b1) * B;
  const int n_tail = max(0, r.pick_end - tail_begin);
  const int nb = p.blk_count[row];
  const int32_t* blk = p.blk_idx + static_cast<int64_t>(row) * p.blk_stride;
  int32_t* out = p.out_idx + static_cast<int64_t>(row) * p.out_stride;
  for (int i = threadIdx.x; i < n_head; i += blockDim.x) out[i] = r.c0 + i;
  for (int i = threadIdx.x; i < nb * B; i += blockDim.x) out[n_head + i] = blk[i / B] * B + i % B;
  for (int i = threadIdx.x; i < n_tail; i += blockDim.x) out[n_head + nb * B + i] = tail_begin + i;
  if (threadIdx.x == 0) p.out_count[row] = n_head + nb * B + n_tail;
}

}  // namespace sieve::cuda

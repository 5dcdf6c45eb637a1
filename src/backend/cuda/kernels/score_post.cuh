// What a selection does to its scores between the scorer and the top-k / top-p (score_fold):
// rows summed (a layer's vote over its KV heads' rows, the raw sum of logits over heads),
// scaled, and max-pooled over neighbouring tokens (TokenSelect's pool_kernel); and the empty
// selection of a policy that ranks nothing (clear_selection: StreamingLLM reads only its sinks
// and window).
#pragma once

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/params.h"

namespace sieve::cuda {

constexpr int fold_threads = 256;
constexpr int fold_tile = 2048;  // outputs per CTA per step; shared memory holds tile + pool - 1

// Grid (x: tiles, grid-stride over the length; y: output rows). Dynamic shared memory:
// (fold_tile + pool - 1) floats.
__global__ void __launch_bounds__(fold_threads) score_fold_kernel(const score_fold_params p) {
  extern __shared__ float s_v[];
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;  // a selection-cache hit
  const int o = blockIdx.y;
  const int len = *p.seq_len;
  const int lo = max(p.lo, 0);
  int hi = len - p.tail;
  if (hi < lo) hi = lo;
  const int w = p.pool > 1 ? p.pool : 1, left = w / 2;
  const float* in = p.in + static_cast<int64_t>(o) * p.fold * p.in_stride;
  float* out = p.out + static_cast<int64_t>(o) * p.out_stride;
  const int n = fold_tile + w - 1;
  for (int t0 = blockIdx.x * fold_tile; t0 < len; t0 += gridDim.x * fold_tile) {
    const int a = t0 - left;  // s_v[i] holds the folded score of token a + i
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += fold_threads) {
      const int t = a + i;
      float s = 0.f;
      if (t >= 0 && t < len)
        for (int r = 0; r < p.fold; ++r) s += in[static_cast<int64_t>(r) * p.in_stride + t];
      s_v[i] = s * p.mul;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < fold_tile; i += fold_threads) {
      const int t = t0 + i;
      if (t >= len) break;
      float v = s_v[i + left];
      if (w > 1 && t >= lo && t < hi) {  // the window clipped to the selectable range
        const int ja = max(lo, t - left), jb = min(hi, t - left + w);
        v = s_v[ja - a];
        for (int j = ja + 1; j < jb; ++j) v = fmaxf(v, s_v[j - a]);
      }
      out[t] = v;
    }
  }
}

// *count = 0 unless *skip says the selection cache kept the row (skip may be null).
__global__ void clear_selection_kernel(int32_t* count, const int32_t* skip) {
  griddep_wait();
  griddep_launch_dependents();
  if (skip == nullptr || *skip == 0) *count = 0;
}

// Hard vote, pass 1: one CTA per head adds its picks into its row's votes.
__global__ void hard_vote_scatter_kernel(const hard_vote_params p) {
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;
  const int h = blockIdx.x;
  const int32_t* idx = p.idx + static_cast<int64_t>(h) * p.idx_stride;
  int32_t* votes = p.votes + static_cast<int64_t>(h / p.heads_per_row) * p.stride;
  const int n = p.count[h];
  for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(votes + idx[i], 1);
}

// Pass 2 (grid x: tiles, y: rows): votes + soft x tie over the range; the votes back to zero.
__global__ void hard_vote_combine_kernel(const hard_vote_params p) {
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;
  const int o = blockIdx.y;
  const int len = *p.seq_len;
  const int lo = max(p.lo, 0);
  const int hi = max(lo, len - p.tail);
  const int64_t base = static_cast<int64_t>(o) * p.stride;
  for (int t = lo + blockIdx.x * blockDim.x + threadIdx.x; t < hi; t += gridDim.x * blockDim.x) {
    const int v = p.votes[base + t];
    p.votes[base + t] = 0;
    p.out[base + t] = __fadd_rn(static_cast<float>(v), __fmul_rn(p.soft[base + t], p.tie));
  }
}

__device__ __forceinline__ void block_range(const block_pick_params& p, int& lo, int& hi) {
  const int len = *p.seq_len;
  lo = max(p.lo, 0);
  hi = max(lo, len - p.tail);
}

// Block sums (grid x: CTAs over the blocks, y: rows): one thread per block.
__global__ void block_sums_kernel(const block_pick_params p) {
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;
  int lo, hi;
  block_range(p, lo, hi);
  const int B = p.block, nb = (hi - lo + B - 1) / B;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *p.n_blocks = nb;
  const float* in = p.scores + static_cast<int64_t>(blockIdx.y) * p.stride;
  float* out = p.block_scores + static_cast<int64_t>(blockIdx.y) * p.stride;
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += gridDim.x * blockDim.x) {
    const int t0 = lo + b * B, t1 = min(hi, t0 + B);
    float s = 0.f;
    for (int t = t0; t < t1; ++t) s += in[t];
    out[b] = s;
  }
}

// The picked blocks' tokens (one CTA per row).
__global__ void __launch_bounds__(256) block_expand_kernel(const block_pick_params p) {
  __shared__ int s_n;
  griddep_wait();
  griddep_launch_dependents();
  if (p.skip != nullptr && *p.skip != 0) return;
  int lo, hi;
  block_range(p, lo, hi);
  const int row = blockIdx.x, B = p.block;
  const int nb = p.blk_count[row];
  const int32_t* blk = p.blk_idx + static_cast<int64_t>(row) * p.blk_stride;
  int32_t* out = p.out_idx + static_cast<int64_t>(row) * p.out_stride;
  // every picked block is whole except one that ends at hi, which can only be the last
  const bool short_last = nb > 0 && lo + (blk[nb - 1] + 1) * B > hi;
  for (int i = threadIdx.x; i < nb * B; i += blockDim.x) {
    const int t = lo + blk[i / B] * B + i % B;
    if (t < hi) out[i] = t;
  }
  if (threadIdx.x == 0) {
    s_n = nb * B - (short_last ? lo + (blk[nb - 1] + 1) * B - hi : 0);
    p.out_count[row] = s_n;
  }
}

}  // namespace sieve::cuda

// TokenSelect's Selection Cache probe (sel_cache_params): one CTA per (layer, decode query).
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/params.h"

namespace sieve::cuda {

constexpr int sel_cache_threads = 256;
constexpr int sel_cache_max_dim = 256;

__global__ void __launch_bounds__(sel_cache_threads) sel_cache_kernel(const sel_cache_params p) {
  __shared__ float s_fp[sel_cache_max_dim];
  __shared__ double s_red[3][sel_cache_threads / 32];
  __shared__ int s_hit, s_base;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int d = p.head_dim, half = p.n_rot / 2;
  griddep_wait();  // q comes from the kernel before
  griddep_launch_dependents();
  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q);
  const double pos = static_cast<double>(*p.pos);
  // fingerprint: mean over heads of the query rotated by -pos (pairs outside n_rot as stored)
  for (int c = tid; c < d; c += sel_cache_threads) {
    int a = c, b = c;
    bool first = true;
    if (c < p.n_rot) {
      const int i = p.neox ? (c < half ? c : c - half) : c / 2;
      first = p.neox ? c < half : (c % 2 == 0);
      a = p.neox ? i : 2 * i;
      b = p.neox ? i + half : 2 * i + 1;
      const double ang = -pos * p.inv_freq[i];
      double sn, cs;
      sincos(ang, &sn, &cs);
      float acc = 0.f;
      for (int h = 0; h < p.n_q_heads; ++h) {
        const float x0 = __bfloat162float(q[h * d + a]), x1 = __bfloat162float(q[h * d + b]);
        acc += first ? x0 * static_cast<float>(cs) - x1 * static_cast<float>(sn)
                     : x0 * static_cast<float>(sn) + x1 * static_cast<float>(cs);
      }
      s_fp[c] = acc / p.n_q_heads;
    } else {
      float acc = 0.f;
      for (int h = 0; h < p.n_q_heads; ++h) acc += __bfloat162float(q[h * d + c]);
      s_fp[c] = acc / p.n_q_heads;
    }
  }
  __syncthreads();
  // cosine with the stored fingerprint (double sums, as the CPU)
  double ab = 0, aa = 0, bb = 0;
  for (int c = tid; c < d; c += sel_cache_threads) {
    const double x = s_fp[c], y = p.fp[c];
    ab += x * y;
    aa += x * x;
    bb += y * y;
  }
  for (int o = 16; o > 0; o >>= 1) {
    ab += __shfl_xor_sync(k_full_mask, ab, o);
    aa += __shfl_xor_sync(k_full_mask, aa, o);
    bb += __shfl_xor_sync(k_full_mask, bb, o);
  }
  if (lane == 0) {
    s_red[0][warp] = ab;
    s_red[1][warp] = aa;
    s_red[2][warp] = bb;
  }
  __syncthreads();
  const int len = *p.seq_len;
  const int n_prefix = len - 1;  // tokens before the query
  const int sinks = min(p.n_sink, n_prefix);
  const int pick_end = max(sinks, n_prefix - p.n_window);
  int* st = p.state;
  if (tid == 0) {
    double sab = 0, saa = 0, sbb = 0;
    for (int w = 0; w < sel_cache_threads / 32; ++w) {
      sab += s_red[0][w];
      saa += s_red[1][w];
      sbb += s_red[2][w];
    }
    const float cosv = (saa == 0 || sbb == 0) ? 0.f : static_cast<float>(sab / sqrt(saa * sbb));
    const int stored_end = st[1];
    const int gap = pick_end - stored_end;
    const int hit = st[0] != 0 && cosv >= p.theta && gap >= 0 && gap <= p.max_gap;
    s_hit = hit;
    *p.skip = hit;
    if (hit) {
      if (p.hits != nullptr) atomicAdd(p.hits, 1u);
      const int base = *p.sel_count - st[2];  // the selection's own picks
      *p.sel_count = base + gap;
      st[2] = gap;
      s_base = base;
    } else {
      st[0] = 1;
      st[1] = pick_end;
      st[2] = 0;
    }
  }
  __syncthreads();
  if (s_hit) {  // the tokens that left the window since the selection, after its picks
    const int stored_end = st[1];
    for (int j = stored_end + tid; j < pick_end; j += sel_cache_threads)
      p.sel_idx[s_base + j - stored_end] = j;
  } else {
    for (int c = tid; c < d; c += sel_cache_threads) p.fp[c] = s_fp[c];
  }
}

}  // namespace sieve::cuda

// Elementwise and row kernels of a transformer forward pass on the GPU (the parts around
// the matmuls and the attention): embedding gather, RMSNorm, RoPE + bf16 packing of the
// fused QKV projection, SwiGLU / GeGLU, residual add. The residual stream stays fp32;
// matmul inputs are bf16 (what cuBLAS reads), matmul outputs fp32. Conventions follow the
// CPU reference (backend/cpu/ops.cpp): RMSNorm x / sqrt(mean(x^2) + eps) * w, RoPE angle
// pos * inv_freq[i] formed in double (inv_freq from the host: base^(-2i / n_rot) times the
// scaling's pair factor, RopeScaling::inv_freqs), NORM mode rotates (2i, 2i+1), NEOX
// (i, i + n_rot/2).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/model_ops.h"

namespace sieve::cuda {

constexpr int model_ops_threads = 256;

__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  const float r = red[0];
  __syncthreads();
  return r;
}

// One CTA per token: h[t, :] = table[ids[t], :] * scale.
__global__ void embed_kernel(const __nv_bfloat16* table, const int32_t* ids, int32_t n_embd,
                             float scale, float* h) {
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = table + static_cast<int64_t>(ids[t]) * n_embd;
  for (int i = threadIdx.x; i < n_embd; i += blockDim.x) {
    h[t * n_embd + i] = __bfloat162float(row[i]) * scale;
  }
}

// One CTA per row: out = x / rms(x) * w, as bf16 (a matmul input) or fp32 in place.
template <bool kBf16Out>
__global__ void rms_norm_kernel(const float* x, const float* w, float eps, int32_t n, void* out) {
  __shared__ float red[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float s = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] * s * w[i];
    if constexpr (kBf16Out) {
      static_cast<__nv_bfloat16*>(out)[static_cast<int64_t>(blockIdx.x) * n + i] =
          __float2bfloat16(v);
    } else {
      static_cast<float*>(out)[static_cast<int64_t>(blockIdx.x) * n + i] = v;
    }
  }
}

// RMSNorm of one head vector (qk_norm) in shared memory, by a warp.
__device__ __forceinline__ void head_norm(float* v, const float* w, int d, float eps) {
  const int lane = threadIdx.x & 31;
  float ss = 0.f;
  for (int i = lane; i < d; i += 32) ss += v[i] * v[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float s = rsqrtf(ss / static_cast<float>(d) + eps);
  for (int i = lane; i < d; i += 32) v[i] = v[i] * s * w[i];
}

// One CTA per token: splits the fused projection row [q | k | v], applies the optional
// per-head RMSNorm and RoPE to q and k, and writes bf16 q [n_head, d], k and v [n_kv, d].
// Shared memory: (n_head + n_kv) * d floats.
__global__ void qkv_rope_kernel(qkv_rope_params p) {
  extern __shared__ float sm[];
  const int64_t t = blockIdx.x;
  const int d = p.head_dim;
  const int nh = p.n_head + p.n_kv;
  const int64_t row_w = static_cast<int64_t>(p.n_head + 2 * p.n_kv) * d;
  const float* row = p.qkv + t * row_w;
  for (int i = threadIdx.x; i < nh * d; i += blockDim.x) sm[i] = row[i];
  __syncthreads();
  if (p.q_norm != nullptr) {
    const int warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int h = warp; h < nh; h += n_warps) {
      head_norm(sm + h * d, h < p.n_head ? p.q_norm : p.k_norm, d, p.eps);
    }
    __syncthreads();
  }
  const int half = p.n_rot / 2;
  const double pos = static_cast<double>(p.pos[t]);
  for (int j = threadIdx.x; j < nh * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const double ang = pos * p.inv_freq[i];
    double sn, cs;
    sincos(ang, &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    float* v = sm + h * d;
    const int a = p.neox ? i : 2 * i;
    const int b = p.neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
  __syncthreads();
  const int qd = p.n_head * d, kd = p.n_kv * d;
  for (int i = threadIdx.x; i < qd; i += blockDim.x) p.q[t * qd + i] = __float2bfloat16(sm[i]);
  for (int i = threadIdx.x; i < kd; i += blockDim.x) {
    p.k[t * kd + i] = __float2bfloat16(sm[qd + i]);
    p.v[t * kd + i] = __float2bfloat16(row[qd + kd + i]);
  }
}

// out[t, i] = act(gu[t, i]) * gu[t, n_ff + i] as bf16 (the down projection's input).
template <bool kGelu>
__global__ void glu_kernel(const float* gu, int32_t n_ff, int64_t n, __nv_bfloat16* out) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / n_ff, i = e % n_ff;
    const float g = gu[t * 2 * n_ff + i], u = gu[t * 2 * n_ff + n_ff + i];
    float a;
    if constexpr (kGelu) {
      constexpr float kC = 0.7978845608028654f;
      a = 0.5f * g * (1.0f + tanhf(kC * g * (1.0f + 0.044715f * g * g)));
    } else {
      a = g / (1.0f + expf(-g));
    }
    out[e] = __float2bfloat16(a * u);
  }
}

// h += (optional RMSNorm of) d, one CTA per row (the post-norm of Gemma's blocks).
template <bool kNorm>
__global__ void residual_add_kernel(float* h, const float* d, const float* w, float eps,
                                    int32_t n) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const float* dr = d + r * n;
  float s = 1.f;
  if constexpr (kNorm) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += dr[i] * dr[i];
    ss = block_sum(ss, red);
    s = rsqrtf(ss / static_cast<float>(n) + eps);
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    h[r * n + i] += kNorm ? dr[i] * s * w[i] : dr[i];
  }
}

// One CTA per row: y[r, :] += b (a projection's bias, broadcast over the rows).
__global__ void bias_add_kernel(float* y, const float* b, int32_t n) {
  float* row = y + static_cast<int64_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] += b[i];
}

}  // namespace sieve::cuda

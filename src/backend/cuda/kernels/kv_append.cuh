// KV append (new tokens' K/V rows into their page slots, plus their sketch keys) and the
// query-side sketch projection (optionally of the mean query of a prefill chunk).
#pragma once

#include "backend/cuda/kernels/common.cuh"

namespace sieve::cuda {

constexpr int append_threads = 256;

template <class KT>
__device__ __forceinline__ KT quantize_sketch(float x, float inv_scale);
template <>
__device__ __forceinline__ __nv_bfloat16 quantize_sketch<__nv_bfloat16>(float x, float inv_scale) {
  return __float2bfloat16_rn(x * inv_scale);
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 quantize_sketch<__nv_fp8_e4m3>(float x, float inv_scale) {
  return __nv_fp8_e4m3(x * inv_scale);  // saturates to +-448
}
template <>
__device__ __forceinline__ int8_t quantize_sketch<int8_t>(float x, float inv_scale) {
  const float r = rintf(x * inv_scale);
  return static_cast<int8_t>(fminf(fmaxf(r, -127.f), 127.f));
}

// One CTA per new token. dynamic smem: n_kv_heads * head_dim floats (the new key row).
template <class T, class KT>
__global__ void __launch_bounds__(append_threads) kv_append_kernel(const kv_append_params p) {
  extern __shared__ float s_k[];
  griddep_wait();
  griddep_launch_dependents();
  const int i = blockIdx.x;
  const int row_elems = p.n_kv_heads * p.head_dim;
  const int64_t dst = p.slot[i] * row_elems;  // rows of a page are [n_kv_heads, head_dim]
  const T* kn = static_cast<const T*>(p.k_new) + static_cast<int64_t>(i) * row_elems;
  const T* vn = static_cast<const T*>(p.v_new) + static_cast<int64_t>(i) * row_elems;
  T* kd = static_cast<T*>(p.k) + dst;
  T* vd = static_cast<T*>(p.v) + dst;
  // 16-byte copies (head_dim is a multiple of 8)
  const int n16 = row_elems / 8;
  for (int j = threadIdx.x; j < n16; j += blockDim.x) {
    reinterpret_cast<uint4*>(kd)[j] = reinterpret_cast<const uint4*>(kn)[j];
    reinterpret_cast<uint4*>(vd)[j] = reinterpret_cast<const uint4*>(vn)[j];
  }
  if (p.sk_keys == nullptr) return;
  for (int j = threadIdx.x; j < row_elems; j += blockDim.x) s_k[j] = static_cast<float>(kn[j]);
  __syncthreads();
  const int r = p.n_kv_heads / p.n_sk_heads;
  const int rd = r * p.head_dim;
  const int ps = p.page_size;
  const int64_t page = p.slot[i] / ps;
  const int off = static_cast<int>(p.slot[i] - page * ps);
  const float inv = 1.f / p.sk_scale;
  KT* sk = static_cast<KT*>(p.sk_keys);
  for (int o = threadIdx.x; o < p.n_sk_heads * p.sk_dim; o += blockDim.x) {
    const int s = o / p.sk_dim, j = o - s * p.sk_dim;
    const float* P = p.proj + static_cast<int64_t>(s) * rd * p.sk_dim;
    const float* x = s_k + s * rd;
    float acc = 0.f;
    for (int e = 0; e < rd; ++e) acc = fmaf(x[e], P[static_cast<int64_t>(e) * p.sk_dim + j], acc);
    sk[((page * p.n_sk_heads + s) * ps + off) * p.sk_dim + j] = quantize_sketch<KT>(acc, inv);
  }
}

// One CTA per (sequence, query head): mean over the sequence's chunk of queries, then the
// projection. dynamic smem: head_dim floats.
__global__ void __launch_bounds__(128) sketch_query_kernel(const sketch_query_params p) {
  extern __shared__ float s_q[];
  griddep_wait();
  griddep_launch_dependents();
  const int b = blockIdx.y, h = blockIdx.x;
  const int D = p.head_dim;
  const int t_begin = p.qo_indptr ? p.qo_indptr[b] : b;
  const int t_end = p.qo_indptr ? p.qo_indptr[b + 1] : b + 1;
  const float inv_n = t_end > t_begin ? 1.f / (t_end - t_begin) : 0.f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int t = t_begin; t < t_end; ++t)
      acc += load_as_float(p.q, p.type, (static_cast<int64_t>(t) * p.n_q_heads + h) * D + d);
    s_q[d] = acc * inv_n;
    const int64_t o = (static_cast<int64_t>(b) * p.n_q_heads + h) * D + d;
    if (p.q_mean != nullptr) {
      if (p.type == dtype::bf16)
        static_cast<__nv_bfloat16*>(p.q_mean)[o] = __float2bfloat16_rn(s_q[d]);
      else if (p.type == dtype::f16)
        static_cast<__half*>(p.q_mean)[o] = __float2half_rn(s_q[d]);
      else
        static_cast<float*>(p.q_mean)[o] = s_q[d];
    }
    if (p.proj == nullptr && p.q_out != nullptr) p.q_out[o] = s_q[d];
  }
  if (p.proj == nullptr || p.q_out == nullptr) return;
  __syncthreads();
  const int G = p.n_q_heads / p.n_kv_heads;
  const int r = p.n_kv_heads / p.n_sk_heads;
  const int g = h / G;
  const int s = g / r;
  const int j = h - s * r * G;  // query index inside the sketch head
  const int n_sq = r * G;
  const float* P =
      p.proj + (static_cast<int64_t>(s) * r * D + static_cast<int64_t>(g - s * r) * D) * p.sk_dim;
  for (int e = threadIdx.x; e < p.sk_dim; e += blockDim.x) {
    float acc = 0.f;
    for (int d = 0; d < D; ++d) acc = fmaf(s_q[d], P[static_cast<int64_t>(d) * p.sk_dim + e], acc);
    p.q_out[((static_cast<int64_t>(b) * p.n_sk_heads + s) * n_sq + j) * p.sk_dim + e] = acc;
  }
}

}  // namespace sieve::cuda

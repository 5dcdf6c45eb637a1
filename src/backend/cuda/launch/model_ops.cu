// Launchers of kernels/model_ops.cuh.
#include <algorithm>

#include "backend/cuda/kernels/model_ops.cuh"

namespace sieve::cuda {

cudaError_t launch_embed(const __nv_bfloat16* table, const int32_t* ids, int32_t n_tok,
                         int32_t n_embd, float scale, float* h, cudaStream_t s) {
  if (n_tok <= 0) return cudaSuccess;
  embed_kernel<<<n_tok, model_ops_threads, 0, s>>>(table, ids, n_embd, scale, h);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm(const float* x, const float* w, float eps, int32_t n_rows, int32_t n,
                            void* out, bool out_bf16, cudaStream_t s) {
  if (n_rows <= 0) return cudaSuccess;
  if (out_bf16) {
    rms_norm_kernel<true><<<n_rows, model_ops_threads, 0, s>>>(x, w, eps, n, out);
  } else {
    rms_norm_kernel<false><<<n_rows, model_ops_threads, 0, s>>>(x, w, eps, n, out);
  }
  return cudaGetLastError();
}

cudaError_t launch_qkv_rope(const qkv_rope_params& p, int32_t n_tok, cudaStream_t s) {
  if (n_tok <= 0) return cudaSuccess;
  if (p.n_rot > 0 && p.inv_freq == nullptr) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(p.n_head + p.n_kv) * p.head_dim * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        qkv_rope_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  qkv_rope_kernel<<<n_tok, model_ops_threads, smem, s>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_glu(const float* gu, int32_t n_tok, int32_t n_ff, bool gelu, __nv_bfloat16* out,
                       cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(n_tok) * n_ff;
  if (n <= 0) return cudaSuccess;
  const int blocks =
      static_cast<int>(std::min<int64_t>((n + model_ops_threads - 1) / model_ops_threads, 4096));
  if (gelu) {
    glu_kernel<true><<<blocks, model_ops_threads, 0, s>>>(gu, n_ff, n, out);
  } else {
    glu_kernel<false><<<blocks, model_ops_threads, 0, s>>>(gu, n_ff, n, out);
  }
  return cudaGetLastError();
}

cudaError_t launch_residual_add(float* h, const float* d, const float* w, float eps, int32_t n_rows,
                                int32_t n, cudaStream_t s) {
  if (n_rows <= 0) return cudaSuccess;
  if (w != nullptr) {
    residual_add_kernel<true><<<n_rows, model_ops_threads, 0, s>>>(h, d, w, eps, n);
  } else {
    residual_add_kernel<false><<<n_rows, model_ops_threads, 0, s>>>(h, d, w, eps, n);
  }
  return cudaGetLastError();
}

cudaError_t launch_bias_add(float* y, const float* b, int32_t n_rows, int32_t n, cudaStream_t s) {
  if (n_rows <= 0) return cudaSuccess;
  bias_add_kernel<<<n_rows, model_ops_threads, 0, s>>>(y, b, n);
  return cudaGetLastError();
}

}  // namespace sieve::cuda

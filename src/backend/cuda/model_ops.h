// Launchers of the forward-pass kernels around the matmuls and the attention
// (kernels/model_ops.cuh): embedding gather, RMSNorm, QKV split + RoPE, GLU, residual add,
// and the row sum of per-KV-head votes. Plain C++ header; asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sieve::cuda {

struct qkv_rope_params {
  const float* qkv = nullptr;     // [n_tok, (n_head + 2 n_kv) * head_dim] fused projection
  const int32_t* pos = nullptr;   // [n_tok] positions
  const float* q_norm = nullptr;  // [head_dim] per-head RMSNorm of q (qk_norm), or null
  const float* k_norm = nullptr;  // [head_dim] (with q_norm)
  float eps = 1e-6f;
  int32_t n_head = 0, n_kv = 0, head_dim = 0, n_rot = 0;
  // [n_rot / 2] pair i turns by pos * inv_freq[i]: base^(-2i/n_rot) times the RoPE scaling's
  // pair factor (RopeScaling::inv_freqs, the CPU's numbers; YaRN's magnitude is in the
  // attention scale, not here).
  const double* inv_freq = nullptr;
  bool neox = false;           // pairs (i, i + n_rot/2), else (2i, 2i+1)
  __nv_bfloat16* q = nullptr;  // [n_tok, n_head, head_dim]
  __nv_bfloat16* k = nullptr;  // [n_tok, n_kv, head_dim]
  __nv_bfloat16* v = nullptr;  // [n_tok, n_kv, head_dim]
};

cudaError_t launch_embed(const __nv_bfloat16* table, const int32_t* ids, int32_t n_tok,
                         int32_t n_embd, float scale, float* h, cudaStream_t s);
// out [n_rows, n] = RMSNorm(x) * w: bf16 when out_bf16, else fp32 (may alias x).
cudaError_t launch_rms_norm(const float* x, const float* w, float eps, int32_t n_rows, int32_t n,
                            void* out, bool out_bf16, cudaStream_t s);
// cudaErrorInvalidValue when n_rot > 0 and inv_freq is null.
cudaError_t launch_qkv_rope(const qkv_rope_params& p, int32_t n_tok, cudaStream_t s);
// out [n_tok, n_ff] = act(gu[:, :n_ff]) * gu[:, n_ff:], act = SiLU or tanh-GELU.
cudaError_t launch_glu(const float* gu, int32_t n_tok, int32_t n_ff, bool gelu, __nv_bfloat16* out,
                       cudaStream_t s);
// h [n_rows, n] += d, or += RMSNorm(d) * w when w is given.
cudaError_t launch_residual_add(float* h, const float* d, const float* w, float eps, int32_t n_rows,
                                int32_t n, cudaStream_t s);

// y [n_rows, n] += b [n] (a projection's bias on every row).
cudaError_t launch_bias_add(float* y, const float* b, int32_t n_rows, int32_t n, cudaStream_t s);

}  // namespace sieve::cuda

// Quantized GEMV for decode: y [n_tok, rows] = x [n_tok, cols] . W[rows, cols]^T with W kept
// in its GGUF block format on the GPU (the tensor bytes as in the file, row after row), so a
// batch-1 step reads the quantized bytes instead of 3.5x as many bf16 ones.
//
// Two kernels per call: x (bf16) is quantized to int8 per 32 elements (d = amax / 127, as
// llama.cpp's q8_1 activations) into a workspace, then one pass over W takes integer dot
// products (dp4a) of the weight quants with those int8 values and applies the block scales
// in fp32. Several token rows share each weight load, so n_tok = 8 reads W once.
// Numerics: the result is exactly dequant(W) . x8 up to fp32 rounding, where x8 = d * q is
// the int8 activation; |x - x8| <= d / 2 = amax / 254 per element (tests check both).
// Plain C++ header; every launch is asynchronous on `s`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ggml_type.h"

namespace sieve::cuda {

constexpr int32_t qgemv_max_tok = 8;

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
bool qgemv_supported(GgmlType t);

// Bytes of one row of `cols` elements as GGUF stores it (cols a multiple of the block size).
inline int64_t qrow_bytes(GgmlType t, int64_t cols) {
  return row_bytes(t, cols);
}

// Bytes of the workspace that holds n_tok rows of quantized activations of `cols` elements:
// int8 [n_tok, cols] then float2 [n_tok, cols / 32] (scale d, integer sum of the quants).
int64_t qgemv_workspace_bytes(int64_t cols, int32_t n_tok);

struct qgemv_params {
  // [rows, qrow_bytes(type, cols)] raw GGUF blocks, 16-byte aligned. The kernels may read the
  // rest of the 16-byte aligned chunk that holds W's last byte (never a chunk past it): that
  // cannot fault, but give W's buffer that slack for compute-sanitizer's sake.
  const void* w = nullptr;
  GgmlType type = GgmlType::Q4_K;
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of the type's block size (32, or 256 for K-quants)
  const __nv_bfloat16* x = nullptr;  // [n_tok, ldx] activations (unread when x_quantized)
  int64_t ldx = 0;                   // elements, >= cols
  int32_t n_tok = 1;                 // 1..qgemv_max_tok
  float* y = nullptr;                // [n_tok, ldy] fp32 output, y[t * ldy + r]
  int64_t ldy = 0;                   // elements, >= rows
  bool accumulate = false;           // y += W x instead of y = W x
  void* workspace = nullptr;         // qgemv_workspace_bytes(cols, n_tok), 16-byte aligned
  // The workspace already holds x quantized by launch_qgemv_quantize (or by an earlier
  // launch_qgemv over the same x, cols and n_tok): products that share an input (Q, K, V;
  // gate, up) quantize it once.
  bool x_quantized = false;
  // Threads that share one row group: 32, 64 or 128; 0 picks from the row length (benchmarks
  // sweep it).
  int32_t threads_per_row = 0;
  // Programmatic dependent launch (sm_90, as launch_cfg::pdl): each kernel may start while the
  // previous one in the stream drains and waits (griddepcontrol.wait) before reading x or
  // touching y; its successor may do the same.
  bool pdl = false;
};

// x [n_tok, ldx] bf16 -> workspace (int8 quants + per-32 scales and sums).
cudaError_t launch_qgemv_quantize(const __nv_bfloat16* x, int64_t ldx, int32_t n_tok, int64_t cols,
                                  void* workspace, cudaStream_t s, bool pdl = false);

// Quantizes x into the workspace (unless x_quantized), then y = W x (or y += W x).
// cudaErrorInvalidValue, with nothing launched, for an unsupported type or bad shape,
// stride, alignment or n_tok.
cudaError_t launch_qgemv(const qgemv_params& p, cudaStream_t s);

}  // namespace sieve::cuda

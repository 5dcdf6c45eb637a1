// Host side of the quantized GEMV (qmatmul.h): argument checks, the activation quantizer,
// the choice of threads per row group and the dispatch to the type's instances.
#include <optional>

#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/qmatmul.h"

namespace sieve::cuda {
namespace {

std::optional<qgemv::qtype> to_qtype(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return qgemv::qtype::q4_0;
    case GgmlType::Q4_1:
      return qgemv::qtype::q4_1;
    case GgmlType::Q5_0:
      return qgemv::qtype::q5_0;
    case GgmlType::Q5_1:
      return qgemv::qtype::q5_1;
    case GgmlType::Q8_0:
      return qgemv::qtype::q8_0;
    case GgmlType::Q4_K:
      return qgemv::qtype::q4_k;
    case GgmlType::Q5_K:
      return qgemv::qtype::q5_k;
    case GgmlType::Q6_K:
      return qgemv::qtype::q6_k;
    default:
      return std::nullopt;
  }
}

// x [n_tok, ldx] bf16 -> quants + (d, sum) per 32; one warp per 32-block (n_tok * cols is a
// multiple of 32, so warps are never split by the bound check).
__global__ void __launch_bounds__(256)
    quantize_kernel(const __nv_bfloat16* x, int64_t ldx, int64_t cols, int64_t n, int8_t* xq,
                    float2* xs) {
  griddep_launch_dependents();
  griddep_wait();  // x comes from the previous kernel
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t t = i / cols, c = i - t * cols;
  const float v = __bfloat162float(x[t * ldx + c]);
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.f;
  const int q = amax > 0.f ? __float2int_rn(v / d) : 0;
  xq[i] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((threadIdx.x & 31) == 0) xs[i / 32] = make_float2(d, static_cast<float>(sum));
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// Where the quants and the (d, sum) pairs of a workspace start.
int8_t* ws_quants(void* ws) {
  return static_cast<int8_t*>(ws);
}
float2* ws_scales(void* ws, int64_t cols, int32_t n_tok) {
  return reinterpret_cast<float2*>(static_cast<uint8_t*>(ws) + cols * n_tok);
}

// Threads per row group: enough chunks per thread to keep loads in flight on long rows,
// whole warps busy on short ones (a 1536-wide Q4_K row has 48 chunks).
int32_t auto_tpg(int64_t chunks) {
  if (chunks >= 192) return 128;
  if (chunks >= 96) return 64;
  return 32;
}

}  // namespace

bool qgemv_supported(GgmlType t) {
  return to_qtype(t).has_value();
}

int64_t qgemv_workspace_bytes(int64_t cols, int32_t n_tok) {
  // cols is a multiple of 32, so the float2 part starts 16-byte aligned
  return cols * n_tok + cols / 32 * n_tok * static_cast<int64_t>(sizeof(float2));
}

cudaError_t launch_qgemv_quantize(const __nv_bfloat16* x, int64_t ldx, int32_t n_tok, int64_t cols,
                                  void* workspace, cudaStream_t s, bool pdl) {
  if (!x || !workspace || !aligned16(workspace) || n_tok < 1 || n_tok > qgemv_max_tok ||
      cols <= 0 || cols % 32 != 0 || ldx < cols)
    return cudaErrorInvalidValue;
  const int64_t n = cols * n_tok;
  const auto grid = static_cast<unsigned>((n + 255) / 256);
  return launch_kernel(quantize_kernel, dim3(grid), dim3(256), 0, launch_cfg{s, pdl}, x, ldx, cols,
                       n, ws_quants(workspace), ws_scales(workspace, cols, n_tok));
}

cudaError_t launch_qgemv(const qgemv_params& p, cudaStream_t s) {
  const auto q = to_qtype(p.type);
  if (!q) return cudaErrorInvalidValue;
  const int64_t block = type_info(p.type)->block_size;
  const int32_t tpg = p.threads_per_row == 0 ? auto_tpg(p.cols / 32) : p.threads_per_row;
  if (!p.w || !aligned16(p.w) || !p.y || !p.workspace || !aligned16(p.workspace) ||
      (!p.x_quantized && !p.x) || p.rows <= 0 || p.cols <= 0 || p.cols % block != 0 ||
      p.cols / 32 > INT32_MAX || p.n_tok < 1 || p.n_tok > qgemv_max_tok || p.ldy < p.rows ||
      (!p.x_quantized && p.ldx < p.cols) || (tpg != 32 && tpg != 64 && tpg != 128))
    return cudaErrorInvalidValue;
  if (!p.x_quantized) {
    const cudaError_t e = launch_qgemv_quantize(p.x, p.ldx, p.n_tok, p.cols, p.workspace, s, p.pdl);
    if (e != cudaSuccess) return e;
  }
  qgemv::kparams k;
  k.w = static_cast<const uint8_t*>(p.w);
  k.row_bytes = qrow_bytes(p.type, p.cols);
  k.rows = p.rows;
  k.chunks = static_cast<int32_t>(p.cols / 32);
  k.xq = ws_quants(p.workspace);
  k.xs = ws_scales(p.workspace, p.cols, p.n_tok);
  k.cols = p.cols;
  k.y = p.y;
  k.ldy = p.ldy;
  k.tpg = tpg;
  k.accumulate = p.accumulate;
  const int64_t rows_per_cta =
      static_cast<int64_t>(qgemv::threads / tpg) * qgemv::rows_for(p.n_tok);
  const int64_t grid = (p.rows + rows_per_cta - 1) / rows_per_cta;
  if (grid > INT32_MAX) return cudaErrorInvalidValue;
  const auto g = static_cast<unsigned>(grid);
  const launch_cfg lc{s, p.pdl};
  switch (*q) {
    case qgemv::qtype::q4_k:
    case qgemv::qtype::q5_k:
    case qgemv::qtype::q6_k:
      return qgemv::run_kquant(*q, p.n_tok, k, g, lc);
    default:
      return qgemv::run_legacy(*q, p.n_tok, k, g, lc);
  }
}

}  // namespace sieve::cuda

// Quantized GEMV (qmatmul.h): y [n_tok, rows] = x8 [n_tok, cols] . dequant(W)[rows, cols]^T.
//
// Activations x8: int8 quants [n_tok, cols] + float2 (d, sum of the 32 quants) per 32 elements.
// Weights: raw GGUF blocks (layouts: docs/shared reference §2, backend/cpu/quant_blocks.h).
//
// Work split. A row is cut into chunks of 32 weights whose quants one thread turns into 8
// int32 words of 4 values (K-quants: 8 chunks per 256-block; legacy types: one chunk per
// 32-block). A group of `tpg` threads (32, 64 or 128) owns R consecutive rows and strides over
// the chunks; each thread loads the R rows' weight chunks once and the matching x8 words once
// per token, so n_tok tokens and R rows share every load (R grows with n_tok to keep the x8
// traffic through L1 below the weight traffic). Partial sums meet through warp shuffles and
// one shared-memory step. Q4_K/Q5_K quants stream with ld.global.nc.L1::no_allocate so they
// do not evict x8 from L1. Per-type block code: kernels/qgemv_blocks.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/qgemv_blocks.cuh"
#include "backend/cuda/launch/launch_util.cuh"

namespace sieve::cuda::qgemv {

constexpr int threads = 128;

struct kparams {
  const uint8_t* w = nullptr;  // [rows, row_bytes]
  int64_t row_bytes = 0;
  int64_t rows = 0;
  int32_t chunks = 0;          // chunks of 32 weights per row (cols / 32)
  const int8_t* xq = nullptr;  // [n_tok, cols]
  const float2* xs = nullptr;  // [n_tok, cols / 32] (d, sum of quants)
  int64_t cols = 0;
  float* y = nullptr;  // [n_tok, ldy]
  int64_t ldy = 0;
  int32_t tpg = 32;  // threads per row group
  bool accumulate = false;
};

// Rows per thread group for n_tok tokens.
constexpr int rows_for(int nt) {
  return nt == 1 ? 1 : (nt <= 3 ? 2 : 4);
}

// ---- the GEMV: blockIdx.x covers threads / tpg groups of R rows.
template <qtype Q, int NT>
__global__ void __launch_bounds__(threads) qgemv_kernel(const kparams p) {
  using T = traits<Q>;
  constexpr int R = rows_for(NT);
  __shared__ float red[threads / 32][R * NT];
  const int tpg = p.tpg;
  const int grp = static_cast<int>(threadIdx.x) / tpg, lt = static_cast<int>(threadIdx.x) % tpg;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * (threads / tpg) + grp) * R;
  const uint8_t* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    // rows past the end re-read the last row; their sums are never stored
    const int64_t rr = row0 + r < p.rows ? row0 + r : p.rows - 1;
    wrow[r] = p.w + rr * p.row_bytes;
  }
  // PDL: the next kernel may launch once every CTA got here; W needs no wait, x8 and y do
  griddep_launch_dependents();
  griddep_wait();
  float acc[R][NT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

  const int64_t ldq = p.cols, lds = p.cols / 32;
  if (row0 < p.rows) {
#pragma unroll 2
    for (int k = lt; k < p.chunks; k += tpg) {
      const int blk = k / T::chunks, sub = k % T::chunks;
      const uint8_t* wb[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wb[r] = wrow[r] + static_cast<int64_t>(blk) * T::block_bytes;
      T::template chunk<R, NT>(wb, sub, p.xq + static_cast<int64_t>(blk) * T::block_elems, ldq,
                               p.xs + static_cast<int64_t>(blk) * (T::block_elems / 32), lds, acc);
    }
  }
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) red[warp][r * NT + t] = v;
    }
  __syncthreads();
  // the group's first warp sums its warps' partials and stores
  if (lt < R * NT) {
    const int r = lt / NT, t = lt % NT;
    const int w0 = grp * (tpg / 32);
    float v = 0.f;
    for (int w = 0; w < tpg / 32; ++w) v += red[w0 + w][lt];
    const int64_t row = row0 + r;
    if (row < p.rows) {
      float* out = p.y + static_cast<int64_t>(t) * p.ldy + row;
      *out = p.accumulate ? *out + v : v;
    }
  }
}

// Instances live in launch/qgemv_legacy.cu and launch/qgemv_kquant.cu (nvcc runs in parallel).
cudaError_t run_legacy(qtype q, int n_tok, const kparams& p, unsigned grid, const launch_cfg& lc);
cudaError_t run_kquant(qtype q, int n_tok, const kparams& p, unsigned grid, const launch_cfg& lc);

template <qtype Q>
cudaError_t run_nt(int n_tok, const kparams& p, unsigned grid, const launch_cfg& lc) {
  switch (n_tok) {
    case 1:
      return launch_kernel(qgemv_kernel<Q, 1>, grid, threads, 0, lc, p);
    case 2:
      return launch_kernel(qgemv_kernel<Q, 2>, grid, threads, 0, lc, p);
    case 3:
      return launch_kernel(qgemv_kernel<Q, 3>, grid, threads, 0, lc, p);
    case 4:
      return launch_kernel(qgemv_kernel<Q, 4>, grid, threads, 0, lc, p);
    case 5:
      return launch_kernel(qgemv_kernel<Q, 5>, grid, threads, 0, lc, p);
    case 6:
      return launch_kernel(qgemv_kernel<Q, 6>, grid, threads, 0, lc, p);
    case 7:
      return launch_kernel(qgemv_kernel<Q, 7>, grid, threads, 0, lc, p);
    case 8:
      return launch_kernel(qgemv_kernel<Q, 8>, grid, threads, 0, lc, p);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace sieve::cuda::qgemv

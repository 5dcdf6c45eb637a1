// Matrix products with quantized or float weights, multithreaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ggml_type.h"

namespace sieve {

class ThreadPool;

// A weight matrix of n_rows rows of n_cols elements (GGUF: ne[0] = n_cols, ne[1] = n_rows).
struct WeightView {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;  // n_rows rows of row_bytes(type, n_cols), contiguous
  int64_t n_rows = 0;
  int64_t n_cols = 0;
};

// Scratch memory reused across calls (activation conversion); grows as needed.
struct MatmulScratch {
  std::vector<uint8_t> buf;
};

// y[i, r] = sum_c x[i, c] * W[r, c] for i < m, r < n_rows.
// x: [m, n_cols] f32 row-major; y: [m, n_rows] f32 row-major.
// Prefill (m > 1) and decode (m == 1) both go through here; the kernel tiles rows of W
// against several activation rows so each weight block is read once per tile.
void matmul(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

// One product of matmul_multi: y[i, r] = sum_c x[i, c] * w[r, c]; y: [m, w.n_rows] f32.
struct MatmulTarget {
  WeightView w;
  float* y = nullptr;
};

// Several products of the same activations x: [m, n_cols] (q/k/v, gate/up), all weights with
// the same n_cols. The activations are converted once per activation format and every
// product runs in the same pool job, which saves the conversions and the wake-ups that
// separate matmul() calls would cost (decode issues hundreds of small matmuls per token).
void matmul_multi(const MatmulTarget* targets, int n_targets, const float* x, int64_t m,
                  ThreadPool& pool, MatmulScratch& scratch);

// Row `row` of W dequantized to f32 (embedding lookup).
void get_row(const WeightView& w, int64_t row, float* dst);

}  // namespace sieve

// Shared by the quantized GEMV tests (qgemv_test.cpp on the GPU, qgemv_blocks_test.cpp on the
// CPU): the types, and the per-element size of the min terms that the kernels apply apart
// from the quants (their fp32 rounding scales with it, not with |w|).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "core/fp16.h"
#include "core/ggml_type.h"

namespace sieve::cuda::test {

inline constexpr GgmlType k_qgemv_types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                             GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                                             GgmlType::Q5_K, GgmlType::Q6_K};

inline bool is_k(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

// |min term| of each element of a row: Q4_1/Q5_1 m, Q4_K/Q5_K dmin * m_j, else 0.
inline std::vector<double> min_terms(GgmlType t, const uint8_t* row, int64_t cols) {
  std::vector<double> out(static_cast<size_t>(cols), 0.0);
  using namespace qblock;
  for (int64_t i = 0; i < cols; ++i) {
    if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) {
      const int64_t bb = t == GgmlType::Q4_1 ? 20 : 24;
      uint16_t m;
      std::memcpy(&m, row + i / 32 * bb + 2, 2);
      out[i] = std::fabs(fp16_to_f32(m));
    } else if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {
      const int64_t bb = t == GgmlType::Q4_K ? 144 : 176;
      const uint8_t* b = row + i / 256 * bb;
      uint16_t dmin;
      std::memcpy(&dmin, b + 2, 2);
      uint8_t sc, m;
      scale_min_k4(static_cast<int>(i % 256 / 32), b + 4, &sc, &m);
      out[i] = std::fabs(static_cast<double>(fp16_to_f32(dmin)) * m);
    }
  }
  return out;
}

}  // namespace sieve::cuda::test

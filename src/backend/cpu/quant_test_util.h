// Random test inputs for the quant and matmul tests: random quant bytes with random scales
// (negative, tiny/subnormal and zero included), activations spanning magnitudes per block.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "core/fp16.h"
#include "core/ggml_type.h"

namespace sieve::testutil {

using namespace qblock;

// A finite fp16 scale: mostly O(0.01..1) of either sign, sometimes tiny (subnormal) or zero.
inline uint16_t random_scale(std::mt19937& rng) {
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  switch (kind(rng)) {
    case 0:
      return f32_to_fp16(u(rng) * 1e-6f);  // subnormal half
    case 1:
      return 0;
    case 2:
      return f32_to_fp16(u(rng) * 30.0f);
    default:
      return f32_to_fp16(u(rng) * 0.1f);
  }
}

inline uint16_t random_finite_half(std::mt19937& rng, bool bf16) {
  for (;;) {
    const auto h = static_cast<uint16_t>(rng());
    const float f = bf16 ? bf16_to_f32(h) : fp16_to_f32(h);
    if (std::isfinite(f) && std::fabs(f) < 1e4f) return h;
  }
}

// n elements of random weights of type t: random quant bytes, random scales.
inline std::vector<uint8_t> random_weights(GgmlType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> buf(static_cast<size_t>(row_bytes(t, n)));
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const int64_t nb = n / type_info(t)->block_size;
  auto set16 = [](void* p, uint16_t v) { std::memcpy(p, &v, 2); };
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  switch (t) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) {
        const float f = u(rng);
        std::memcpy(buf.data() + 4 * i, &f, 4);
      }
      break;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i)
        set16(buf.data() + 2 * i, random_finite_half(rng, t == GgmlType::BF16));
      break;
    case GgmlType::Q4_0:
      for (int64_t i = 0; i < nb; ++i)
        set16(&reinterpret_cast<BlockQ4_0*>(buf.data())[i].d, random_scale(rng));
      break;
    case GgmlType::Q4_1:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ4_1*>(buf.data())[i];
        set16(&b.d, random_scale(rng));
        set16(&b.m, random_scale(rng));
      }
      break;
    case GgmlType::Q5_0:
      for (int64_t i = 0; i < nb; ++i)
        set16(&reinterpret_cast<BlockQ5_0*>(buf.data())[i].d, random_scale(rng));
      break;
    case GgmlType::Q5_1:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ5_1*>(buf.data())[i];
        set16(&b.d, random_scale(rng));
        set16(&b.m, random_scale(rng));
      }
      break;
    case GgmlType::Q8_0:
      for (int64_t i = 0; i < nb; ++i)
        set16(&reinterpret_cast<BlockQ8_0*>(buf.data())[i].d, random_scale(rng));
      break;
    case GgmlType::Q4_K:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ4_K*>(buf.data())[i];
        set16(&b.d, random_scale(rng));
        set16(&b.dmin, random_scale(rng));
      }
      break;
    case GgmlType::Q5_K:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ5_K*>(buf.data())[i];
        set16(&b.d, random_scale(rng));
        set16(&b.dmin, random_scale(rng));
      }
      break;
    case GgmlType::Q6_K:
      for (int64_t i = 0; i < nb; ++i)
        set16(&reinterpret_cast<BlockQ6_K*>(buf.data())[i].d, random_scale(rng));
      break;
    default:
      std::abort();
  }
  return buf;
}

// Activations with a spread of magnitudes per block (and one all-zero block when n allows).
inline std::vector<float> random_activations(int64_t n, std::mt19937& rng, bool with_zero_block) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-3.0f, 3.0f);
  for (int64_t i = 0; i < n; i += 32) {
    const float s = std::pow(10.0f, mag(rng));
    for (int64_t j = i; j < std::min(n, i + 32); ++j) x[j] = g(rng) * s;
  }
  if (with_zero_block && n >= 512) std::fill(x.begin() + 256, x.begin() + 288, 0.0f);
  return x;
}

}  // namespace sieve::testutil

#include "sparse/sketch.h"

#include <cmath>
#include <random>

namespace sieve {

SketchProjection::SketchProjection(const SketchSpec& spec) : spec_(spec) {
  if (spec.dim <= 0 || spec.indexer || spec.basis) return;
  const int32_t n_proj = spec.shared ? 1 : spec.n_kv_head;
  p_.resize(static_cast<size_t>(n_proj) * spec.head_dim * spec.dim);
  // A fixed generator and distribution formula so that a seed means the same P everywhere
  // (std::normal_distribution is implementation-defined): Box-Muller over mt19937_64.
  std::mt19937_64 rng(spec.seed);
  const double sd = 1.0 / std::sqrt(static_cast<double>(spec.dim));
  auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  for (size_t i = 0; i < p_.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * M_PI * uniform();
    p_[i] = static_cast<float>(sd * r * std::cos(a));
    if (i + 1 < p_.size()) p_[i + 1] = static_cast<float>(sd * r * std::sin(a));
  }
}

void SketchProjection::project(const float* x, int32_t layer, int32_t kv_head, float* out) const {
  const int32_t d = spec_.head_dim, ds = spec_.dim;
  const float* p = spec_.basis
                       ? spec_.basis->matrix(layer, kv_head)
                       : p_.data() + (spec_.shared ? 0 : static_cast<size_t>(kv_head) * d * ds);
  for (int32_t c = 0; c < ds; ++c) out[c] = 0.0f;
  for (int32_t i = 0; i < d; ++i) {
    const float xi = x[i];
    const float* row = p + static_cast<size_t>(i) * ds;
    for (int32_t c = 0; c < ds; ++c) out[c] += xi * row[c];
  }
}

}  // namespace sieve

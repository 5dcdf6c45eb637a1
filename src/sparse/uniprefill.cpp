#include "sparse/uniprefill.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sieve {

Result<std::vector<int32_t>> uniprefill_layers(const PolicyConfig& p,
                                               std::span<const uint8_t> full_layer) {
  const int32_t n = static_cast<int32_t>(full_layer.size());
  if (!p.up_layers.empty()) {
    for (int32_t l : p.up_layers) {
      if (l >= n) {
        return make_error(
            "policy knob up_layers: layer {} does not exist; the model has layers 0..{}", l, n - 1);
      }
      if (!full_layer[l]) {
        return make_error(
            "policy knob up_layers: layer {} is a sliding-window layer; selection needs a "
            "full-attention "
            "layer (its queries see every token)",
            l);
      }
    }
    return p.up_layers;
  }
  std::vector<int32_t> layers;
  const bool hybrid = std::find(full_layer.begin(), full_layer.end(), false) != full_layer.end();
  if (hybrid) {
    for (int32_t l = 1; l < n; ++l) {
      if (full_layer[l]) layers.push_back(l);
    }
    return layers;
  }
  const int32_t first = std::max(1, static_cast<int32_t>(std::lround(15.0 * n / 32.0)));
  const int32_t step = std::max(1, static_cast<int32_t>(std::lround(n / 8.0)));
  for (int32_t l = first; l < n - 1; l += step) layers.push_back(l);
  return layers;
}

void uniprefill_keep(const PolicyConfig& p, std::span<const float> importance,
                     std::span<const int32_t> pos, std::vector<char>& keep) {
  const int64_t n = static_cast<int64_t>(importance.size());
  keep.assign(n, 0);
  if (n == 0) return;
  const int64_t G = std::max(1, p.up_block);
  const int64_t n_blocks = (n + G - 1) / G;
  std::vector<double> score(n_blocks, 0.0);
  double total = 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t r0 = b * G, r1 = std::min(n, r0 + G);
    double s = 0;
    for (int64_t r = r0; r < r1; ++r) s += std::max(0.0f, importance[r]);
    score[b] = s / static_cast<double>(r1 - r0);
    total += score[b];
  }
  std::vector<char> keep_block(n_blocks, 0);
  if (p.up_p >= 1.0f || !(total > 0)) {
    std::fill(keep_block.begin(), keep_block.end(), 1);
  } else {
    std::vector<int64_t> order(n_blocks);
    std::iota(order.begin(), order.end(), int64_t{0});
    // Best first; ties by position so the choice is deterministic.
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    double before = 0;
    for (int64_t b : order) {
      if (before > p.up_p * total) break;
      keep_block[b] = 1;
      before += score[b];
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    keep[r] = keep_block[r / G] || pos[r] < p.up_sinks || r >= n - p.up_tail;
  }
}

}  // namespace sieve

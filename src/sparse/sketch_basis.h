// A PCA sketch basis (the sketch preset's `sketch_basis` knob, docs/sparse.md): per layer and
// KV head, the top d_s eigenvectors of the second moment E[k k^T] of the post-RoPE keys the
// model writes on calibration text (`sieve calibrate --sketch-basis`). Its columns are
// orthonormal, so (q U).(k U) = q.(U U^T k) keeps the exact scorer's scale and equals q.k for
// keys inside the span; the JL projection's noise is replaced by the keys' own main axes
// (Loki's low-rank keys).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace sieve {

struct SketchBasis {
  int32_t n_layer = 0, n_kv_head = 0, head_dim = 0, dim = 0;
  std::vector<uint8_t> fitted;   // [n_layer] 1: the layer has bases (full-attention layers)
  std::vector<float> p;          // [n_layer, n_kv_head, head_dim, dim] (zeros where not fitted)
  std::vector<double> captured;  // [n_layer, n_kv_head] share of E[|k|^2] inside the span
  std::string model_name, model_arch;
  int64_t tokens = 0;  // calibration keys per (layer, head)
  const float* matrix(int32_t layer, int32_t kv_head) const {
    return p.data() + (static_cast<size_t>(layer) * n_kv_head + kv_head) * head_dim * dim;
  }
};

// Accumulates E[k k^T] per (layer, KV head) in double, then keeps the top `dim` eigenvectors.
class KeyMoments {
 public:
  KeyMoments(int32_t n_layer, int32_t n_kv_head, int32_t head_dim);
  // n rows of head_dim floats, all of one (layer, KV head).
  void add(int32_t layer, int32_t kv_head, const float* keys, int64_t n);
  SketchBasis fit(int32_t dim) const;

 private:
  int32_t n_layer_, n_kv_head_, d_;
  std::vector<double> m_;       // [n_layer, n_kv_head, d, d]
  std::vector<int64_t> count_;  // [n_layer, n_kv_head]
};

Status save_sketch_basis(const SketchBasis& b, const std::string& path);
// Validates every field (shapes, sizes, finite values); the message names the file and field.
Result<SketchBasis> load_sketch_basis(const std::string& path);

}  // namespace sieve

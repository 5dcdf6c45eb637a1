// Sketch keys (SequenceO1's Sketch Attention): a seeded Johnson-Lindenstrauss projection P
// (head_dim x d_s, entries N(0, 1/d_s), so (qP).(kP) estimates q.k at the same scale and a
// soft vote over sketch scores has the exact scorer's temperature). Keys are projected when
// they are appended (the store keeps d_s floats per KV head per token); queries at scoring.
// Scores only rank tokens: attention then reads the real K/V of the selected set.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparse/sketch_basis.h"

namespace sieve {

struct SketchSpec {
  int32_t head_dim = 0;
  int32_t dim = 0;  // d_s
  int32_t n_kv_head = 0;
  bool shared = true;  // one P for every head
  uint64_t seed = 0;
  // RTPurbo: the slots hold the head plan's indexer keys (k_preRoPE W_K, written by Forward
  // from the sequence's plan), not JL sketches; no random projection is made.
  bool indexer = false;
  // PCA variant (`sketch_basis` knob): per-layer, per-KV-head bases from this file replace the
  // random projection (dim = the basis's, shared = false).
  std::string basis_path;
  std::shared_ptr<const SketchBasis> basis;
  bool operator==(const SketchSpec& o) const {
    return head_dim == o.head_dim && dim == o.dim && n_kv_head == o.n_kv_head &&
           shared == o.shared && seed == o.seed && indexer == o.indexer &&
           basis_path == o.basis_path;
  }
};

class SketchProjection {
 public:
  SketchProjection() = default;
  explicit SketchProjection(const SketchSpec& spec);
  const SketchSpec& spec() const { return spec_; }
  bool enabled() const { return spec_.dim > 0; }
  // out[0..dim) = x[0..head_dim) P_(layer, head); the JL projection ignores the layer.
  void project(const float* x, int32_t layer, int32_t kv_head, float* out) const;

 private:
  SketchSpec spec_;
  std::vector<float> p_;  // [n_proj, head_dim, dim]
};

}  // namespace sieve

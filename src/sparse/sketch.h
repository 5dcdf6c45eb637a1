// Sketch keys (SequenceO1's Sketch Attention): a seeded Johnson-Lindenstrauss projection P
// (head_dim x d_s, entries N(0, 1/d_s), so (qP).(kP) estimates q.k at the same scale and a
// soft vote over sketch scores has the exact scorer's temperature). Keys are projected when
// they are appended (the store keeps d_s floats per KV head per token); queries at scoring.
// Scores only rank tokens: attention then reads the real K/V of the selected set.
#pragma once

#include <cstdint>
#include <vector>

namespace sieve {

struct SketchSpec {
  int32_t head_dim = 0;
  int32_t dim = 0;        // d_s
  int32_t n_kv_head = 0;
  bool shared = true;     // one P for every head
  uint64_t seed = 0;
  // RTPurbo: the slots hold the head plan's indexer keys (k_preRoPE W_K, written by Forward
  // from the sequence's plan), not JL sketches; no random projection is made.
  bool indexer = false;
  bool operator==(const SketchSpec&) const = default;
};

class SketchProjection {
 public:
  SketchProjection() = default;
  explicit SketchProjection(const SketchSpec& spec);
  const SketchSpec& spec() const { return spec_; }
  bool enabled() const { return spec_.dim > 0; }
  // out[0..dim) = x[0..head_dim) P_head
  void project(const float* x, int32_t kv_head, float* out) const;

 private:
  SketchSpec spec_;
  std::vector<float> p_;  // [n_proj, head_dim, dim]
};

}  // namespace sieve

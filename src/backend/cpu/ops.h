// Elementwise and row-wise float ops of the forward pass (CPU reference and fast path).
#pragma once

#include <cstdint>

#include "core/rope_mode.h"

#include <vector>

namespace sieve {

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * w   for n_rows rows of n (in place ok).
void rms_norm(const float* x, const float* w, float eps, int64_t n_rows, int64_t n, float* out);

// Rotates the first n_rot dims of each head of x [n_tok, n_heads, head_dim] by angle
// pos[t] * base^(-2i/n_rot) * scaling.pair_factors(i); NORM pairs (2i, 2i+1), NEOX pairs
// (i, i + n_rot/2). A pure rotation: YaRN's magnitude lives in the model's attn_scale.
void rope(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim, int n_rot,
          float base, RopeMode mode, const RopeScaling& scaling = {});
// rope() of q [n_tok, n_q_heads, head_dim] and k [n_tok, n_k_heads, head_dim] at the same
// positions, bitwise as two calls; the cos/sin are formed once per token for both.
void rope_qk(float* q, int n_q_heads, float* k, int n_k_heads, const int32_t* pos, int64_t n_tok,
             int head_dim, int n_rot, float base, RopeMode mode, const RopeScaling& scaling = {});

// x[r, :] += bias for n_rows rows of n (the Q/K/V projection biases of qwen2).
void add_bias(float* x, const float* bias, int64_t n_rows, int64_t n);

// RoPE rotations by arbitrary (also negative) position offsets without trigonometry per
// call: cos/sin of p * theta_i come from two small tables (p = hi * 1024 + lo, angle
// addition), so re-rotating thousands of selected keys per step (compact positions) costs a
// few multiply-adds per pair. Tables grow with reserve(); rotate() itself is const and safe
// to call from many threads once the needed range is reserved.
class RopeRotator {
 public:
  RopeRotator(int head_dim, int n_rot, float base, RopeMode mode, const RopeScaling& scaling = {});
  // Makes offsets with |offset| <= max_abs available (not thread-safe; call before rotate).
  void reserve(int64_t max_abs);
  // Rotates n_heads vectors of head_dim by `offset` positions (x at position p moves to p +
  // offset).
  void rotate(float* x, int n_heads, int64_t offset) const;
  // Rotates n_rows head vectors (row t at x + t * stride) by delta[t] positions each, with
  // |delta[t]| < kNear: one table row per vector, no angle addition (selection scores over a run
  // of consecutive keys: the tile's common offset goes to the query, each key turns by its
  // small distance from the tile's first key).
  static constexpr int64_t kNear = 1024;
  void rotate_near(float* x, int n_rows, int64_t stride, const int64_t* delta) const;
  float base() const { return base_; }

 private:
  // rows [from, to) of a cos/sin table for positions row * step
  void fill(float* cs, float* sn, int64_t from, int64_t to, int64_t step) const;
  int head_dim_, half_;
  float base_;
  RopeMode mode_;
  std::vector<double> inv_freq_;                          // [half] base^(-2i/n_rot) * pair factor
  std::vector<float> lo_cos_, lo_sin_, hi_cos_, hi_sin_;  // [1024 | n_hi, half]
  // Norm mode, offsets < kNear, in the lanes of the pairs: (c_i, c_i) and (-s_i, s_i), so that
  // rotate_near is x * cos + pair_swap(x) * sin. [kNear, 2 * half]
  std::vector<float> lane_cos_, lane_sin_;
  int64_t n_hi_ = 0;
};

// gate[i] = act(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
void gelu_tanh_mul(float* gate, const float* up, int64_t n);

// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);
float dot_f32(const float* a, const float* b, int64_t n);

// Converts between f32 and IEEE half (F16C when present).
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);
void f16_to_f32_row(const uint16_t* x, float* y, int64_t n);

}  // namespace sieve

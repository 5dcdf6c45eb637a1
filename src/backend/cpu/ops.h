// Elementwise and row-wise float ops of the forward pass (CPU reference and fast path).
#pragma once

#include <cstdint>

#include "core/rope_mode.h"

namespace sieve {

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * w   for n_rows rows of n (in place ok).
void rms_norm(const float* x, const float* w, float eps, int64_t n_rows, int64_t n, float* out);

// Rotates the first n_rot dims of each head of x [n_tok, n_heads, head_dim] by angle
// pos[t] * base^(-2i/n_rot); NORM pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2).
void rope(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim, int n_rot,
          float base, RopeMode mode);

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

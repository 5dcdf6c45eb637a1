#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sieve {
// Which dims RoPE rotates together: NORM pairs (2i, 2i+1) (llama GGUFs, whose converter
// permutes Q/K rows), NEOX pairs (i, i + n_rot/2) (gemma, qwen2, HF rotate_half).
enum class RopeMode { norm, neox };

enum class RopeScalingType { none, linear, yarn };

// RoPE context extension, with llama.cpp's meaning of every field (ggml_rope_ext's
// freq_scale / ext_factor / n_ctx_orig / beta_fast / beta_slow, and the magnitude that
// llama_context applies). Plain data: CPU ops, CUDA launchers and loaders share it.
//
// Pair i (of n_rot / 2) turns by pos * base^(-2i/n_rot) * pair_factor(i), where
//   pair_factor(i) = freq_scale * (1 - mix_i) + mix_i,   freq_scale = 1 / factor,
//   mix_i = ext_factor * ramp(i),  ramp(i) = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1),
// and lo/hi are the pair indices whose wavelength fits beta_fast / beta_slow times into
// n_ctx_orig: high-frequency pairs (i <= lo) keep their frequency, low-frequency ones
// (i >= hi) are interpolated by 1/factor. Linear scaling is ext_factor = 0 (every pair
// interpolated). YaRN also scales q.k by mscale^2 (mscale on both q and k), mscale =
// attn_factor * (1 + 0.1 ln(factor)); the model folds it into its attention scale.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  float factor = 1.0f;       // context extension factor (rope.scaling.factor, --rope-scale)
  int32_t n_ctx_orig = 0;    // the context the model was trained with (YaRN's ramp)
  float ext_factor = 0.0f;   // 1 for YaRN, 0 for linear (llama.cpp's default for each)
  float attn_factor = 1.0f;  // rope.scaling.attn_factor (extra magnitude, 1 for Qwen2.5)
  float beta_fast = 32.0f;   // llama.cpp's defaults
  float beta_slow = 1.0f;

  bool active() const { return type != RopeScalingType::none && factor != 1.0f; }
  float freq_scale() const { return active() ? 1.0f / factor : 1.0f; }

  // The magnitude on q and on k (so q.k scales by its square).
  float mscale() const {
    if (!active() || ext_factor == 0.0f) return attn_factor;
    return attn_factor * (factor <= 1.0f ? 1.0f : 1.0f + 0.1f * std::log(factor));
  }

  // YaRN's corner pairs [lo, hi] for a RoPE base (ggml_rope_yarn_corr_dims: the pair index
  // whose wavelength times beta equals n_ctx_orig, floor for beta_fast, ceil for beta_slow,
  // clamped to [0, n_rot - 1]).
  void corr_dims(int n_rot, float base, float out[2]) const {
    auto dim = [&](float beta) {
      return static_cast<float>(n_rot) *
             std::log(static_cast<float>(n_ctx_orig) / (beta * 2.0f * 3.14159265358979f)) /
             (2.0f * std::log(base));
    };
    out[0] = std::max(0.0f, std::floor(dim(beta_fast)));
    out[1] = std::min(static_cast<float>(n_rot - 1), std::ceil(dim(beta_slow)));
  }

  // out[i] = pair_factor(i) for i < n_rot / 2.
  void pair_factors(int n_rot, float base, float* out) const {
    const int half = n_rot / 2;
    const float fs = freq_scale();
    if (!active()) {
      std::fill(out, out + half, 1.0f);
      return;
    }
    float lohi[2] = {0.0f, 0.0f};
    if (ext_factor != 0.0f) corr_dims(n_rot, base, lohi);
    for (int i = 0; i < half; ++i) {
      float mix = 0.0f;
      if (ext_factor != 0.0f) {
        const float y = (static_cast<float>(i) - lohi[0]) / std::max(0.001f, lohi[1] - lohi[0]);
        mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * ext_factor;
      }
      out[i] = fs * (1.0f - mix) + mix;
    }
  }

  // out[i] = base^(-2i/n_rot) * pair_factor(i) for i < n_rot / 2, in double: the per-pair
  // angle per position that every backend rotates by (the CPU ops, the CUDA kernels' tables).
  void inv_freqs(int n_rot, float base, double* out) const {
    const int half = n_rot / 2;
    float f[512];
    pair_factors(n_rot, base, f);
    for (int i = 0; i < half; ++i)
      out[i] = std::pow(static_cast<double>(base), -2.0 * i / n_rot) * f[i];
  }
};

}  // namespace sieve

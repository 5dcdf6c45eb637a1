// RopeRotator: rotating a vector already at position a by offset b equals RoPE at a + b,
// for both pair layouts, negative offsets and positions far beyond a million.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"

namespace sieve {
namespace {

// d 64: the AVX2 path where the CPU has it (pairs in groups of 8); d 20: the scalar path.
void check_offset_rotation(int d) {
  const int heads = 3;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (RopeMode mode : {RopeMode::norm, RopeMode::neox}) {
    RopeRotator rot(d, d, 10000.0f, mode);
    rot.reserve(3'000'000);
    const int32_t cases[][2] = {
        {0, 5}, {100, -100}, {7000, 1234}, {1'500'000, -1'499'000}, {3, 2'000'000}};
    for (const auto& c : cases) {
      std::vector<float> x(heads * d);
      for (float& v : x) v = nd(rng);
      std::vector<float> a = x, b = x;
      const int32_t pa = c[0], sum = c[0] + c[1];
      rope(a.data(), &pa, 1, heads, d, d, 10000.0f, mode);
      rot.rotate(a.data(), heads, c[1]);
      rope(b.data(), &sum, 1, heads, d, d, 10000.0f, mode);
      for (int i = 0; i < heads * d; ++i) {
        EXPECT_NEAR(a[i], b[i], 2e-4f)
            << "d " << d << " pos " << pa << " offset " << c[1] << " i " << i;
      }
    }
  }
}

TEST(RopeRotator, OffsetRotationEqualsRopeAtTheSum) {
  check_offset_rotation(64);
  check_offset_rotation(128);
  check_offset_rotation(20);
}

// The activations against a double reference over a wide range (both signs, past exp's
// range), and an element's value does not depend on the call's length or its position in
// it (a decode row equals the same row of a prefill chunk).
void check_activation(void (*fn)(float*, const float*, int64_t), double (*ref)(double),
                      const char* name) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(-12.0f, 12.0f);
  std::vector<float> g(1539), u(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = ud(rng);
    u[i] = ud(rng);
  }
  const float edge[] = {0.0f, -0.0f, 1e-7f, -1e-7f, 88.0f, -88.0f, 150.0f, -150.0f, 1e30f, -1e30f};
  for (size_t i = 0; i < std::size(edge); ++i) g[i] = edge[i];
  std::vector<float> all = g;
  fn(all.data(), u.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = ref(g[i]) * u[i];
    EXPECT_NEAR(all[i], want, 2e-6 * std::max(1.0, std::abs(want))) << name << " g " << g[i];
    for (int64_t n : {1, 5}) {  // alone, and at another position of a shorter call
      std::vector<float> one(n, 0.5f), uo(n, 1.0f);
      one[n - 1] = g[i];
      uo[n - 1] = u[i];
      fn(one.data(), uo.data(), n);
      ASSERT_EQ(one[n - 1], all[i]) << name << " element " << i << " in a call of " << n;
    }
  }
}

double silu_ref(double g) {
  return g / (1.0 + std::exp(-g));
}
double gelu_ref(double g) {
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * g * (1.0 + 0.044715 * g * g)));
}

TEST(Activations, MatchDoubleReferenceAndDoNotDependOnTheCall) {
  check_activation(silu_mul, silu_ref, "silu");
  check_activation(gelu_tanh_mul, gelu_ref, "gelu");
}

TEST(Rope, QkInOneCallEqualsTwoCalls) {
  const int d = 64, nq = 9, nk = 3, n_tok = 3;
  const int32_t pos[n_tok] = {0, 4097, 1'000'003};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (RopeMode mode : {RopeMode::norm, RopeMode::neox}) {
    std::vector<float> q(n_tok * nq * d), k(n_tok * nk * d);
    for (float& v : q) v = nd(rng);
    for (float& v : k) v = nd(rng);
    std::vector<float> q2 = q, k2 = k;
    rope_qk(q.data(), nq, k.data(), nk, pos, n_tok, d, d, 10000.0f, mode);
    rope(q2.data(), pos, n_tok, nq, d, d, 10000.0f, mode);
    rope(k2.data(), pos, n_tok, nk, d, d, 10000.0f, mode);
    EXPECT_EQ(q, q2);
    EXPECT_EQ(k, k2);
  }
}

// rms_norm against a double reference, rows of lengths that are and are not multiples of 8.
TEST(RmsNorm, MatchesDoubleReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t n : {1, 7, 64, 576, 643}) {
    const int64_t rows = 3;
    std::vector<float> x(rows * n), w(n), out(rows * n);
    for (float& v : x) v = nd(rng);
    for (float& v : w) v = nd(rng);
    rms_norm(x.data(), w.data(), 1e-5f, rows, n, out.data());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
      const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int64_t i = 0; i < n; ++i) {
        const double want = x[r * n + i] * scale * w[i];
        EXPECT_NEAR(out[r * n + i], want, 1e-5 * std::max(1.0, std::abs(want)))
            << "n " << n << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace sieve

namespace sieve {
namespace {

// YaRN as llama.cpp defines it (ggml's rope_yarn / ggml_rope_yarn_corr_dims), written out
// per pair in double: theta_extrap = p * base^(-2i/n), theta_interp = theta_extrap / factor,
// mixed by ramp(i) * ext_factor; a pure rotation (the magnitude is the model's attn_scale).
void yarn_reference(double* x, int32_t p, int d, int n_rot, double base, RopeMode mode,
                    double factor, int n_ctx_orig, double ext_factor, double beta_fast,
                    double beta_slow) {
  auto corr = [&](double beta) {
    return n_rot * std::log(n_ctx_orig / (beta * 2 * 3.14159265358979323846)) /
           (2 * std::log(base));
  };
  const double lo = std::max(0.0, std::floor(corr(beta_fast)));
  const double hi = std::min(static_cast<double>(n_rot - 1), std::ceil(corr(beta_slow)));
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const double extrap = p * std::pow(base, -2.0 * i / n_rot);
    const double interp = extrap / factor;
    const double y = (i - lo) / std::max(0.001, hi - lo);
    const double mix = (1 - std::min(1.0, std::max(0.0, y))) * ext_factor;
    const double theta = interp * (1 - mix) + extrap * mix;
    const int a = mode == RopeMode::norm ? 2 * i : i;
    const int b = mode == RopeMode::norm ? 2 * i + 1 : i + half;
    const double x0 = x[a], x1 = x[b];
    x[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
    x[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
  (void)d;
}

// Qwen2.5's YaRN (factor 4 from 32768, theta 1e6, beta 32/1): pairs 0..11 keep their
// frequency, 20.. are interpolated by 1/4, the ramp between is linear.
TEST(RopeScaling, QwenYarnPairFactorsAndMscale) {
  RopeScaling s;
  s.type = RopeScalingType::yarn;
  s.factor = 4.0f;
  s.n_ctx_orig = 32768;
  s.ext_factor = 1.0f;
  float lohi[2];
  s.corr_dims(64, 1e6f, lohi);
  EXPECT_EQ(lohi[0], 11.0f);
  EXPECT_EQ(lohi[1], 20.0f);
  float f[32];
  s.pair_factors(64, 1e6f, f);
  for (int i = 0; i <= 11; ++i) EXPECT_FLOAT_EQ(f[i], 1.0f) << i;
  for (int i = 20; i < 32; ++i) EXPECT_FLOAT_EQ(f[i], 0.25f) << i;
  EXPECT_NEAR(f[15], 0.25 * (4.0 / 9.0) + 5.0 / 9.0, 1e-6);
  EXPECT_NEAR(s.mscale(), 1.0 + 0.1 * std::log(4.0), 1e-6);
  s.ext_factor = 0.0f;  // linear: every pair interpolated, no magnitude
  s.pair_factors(64, 1e6f, f);
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(f[i], 0.25f) << i;
  EXPECT_EQ(s.mscale(), 1.0f);
  EXPECT_EQ(RopeScaling{}.mscale(), 1.0f);
  EXPECT_FALSE(RopeScaling{}.active());
}

TEST(RopeScaling, YarnRopeMatchesScalarReference) {
  const int heads = 2;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  struct Case {
    int d, n_rot;
    float base, factor;
    int orig;
    float ext, beta_fast, beta_slow;
  };
  const Case cases[] = {{64, 64, 1e6f, 4.0f, 32768, 1.0f, 32.0f, 1.0f},
                        {128, 128, 1e6f, 4.0f, 32768, 1.0f, 32.0f, 1.0f},
                        {128, 96, 1e4f, 8.0f, 4096, 0.5f, 16.0f, 2.0f},
                        {64, 64, 1e6f, 4.0f, 32768, 0.0f, 32.0f, 1.0f}};
  for (const Case& c : cases) {
    RopeScaling s;
    s.type = RopeScalingType::yarn;
    s.factor = c.factor;
    s.n_ctx_orig = c.orig;
    s.ext_factor = c.ext;
    s.beta_fast = c.beta_fast;
    s.beta_slow = c.beta_slow;
    for (RopeMode mode : {RopeMode::norm, RopeMode::neox}) {
      for (int32_t p : {0, 1, 77, 32767, 70000, 131071}) {
        std::vector<float> x(heads * c.d);
        for (float& v : x) v = nd(rng);
        std::vector<double> want(x.begin(), x.end());
        for (int h = 0; h < heads; ++h) {
          yarn_reference(want.data() + h * c.d, p, c.d, c.n_rot, c.base, mode, c.factor, c.orig,
                         c.ext, c.beta_fast, c.beta_slow);
        }
        rope(x.data(), &p, 1, heads, c.d, c.n_rot, c.base, mode, s);
        for (int i = 0; i < heads * c.d; ++i) {
          ASSERT_NEAR(x[i], want[i], 2e-4) << "d " << c.d << " pos " << p << " i " << i;
        }
        // The rotator (compact positions) turns by the same scaled frequencies.
        RopeRotator rot(c.d, c.n_rot, c.base, mode, s);
        rot.reserve(200000);
        std::vector<float> y(heads * c.d);
        for (float& v : y) v = nd(rng);
        std::vector<float> z = y;
        rot.rotate(y.data(), heads, p);
        rope(z.data(), &p, 1, heads, c.d, c.n_rot, c.base, mode, s);
        for (int i = 0; i < heads * c.d; ++i)
          ASSERT_NEAR(y[i], z[i], 2e-4) << "rotator pos " << p << " i " << i;
      }
    }
  }
}

TEST(AddBias, AddsTheVectorToEveryRow) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const float b[3] = {0.5f, -1.0f, 2.0f};
  add_bias(x.data(), b, 2, 3);
  EXPECT_EQ(x, (std::vector<float>{1.5f, 1.0f, 5.0f, 4.5f, 4.0f, 8.0f}));
}

}  // namespace
}  // namespace sieve

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
    const int32_t cases[][2] = {{0, 5}, {100, -100}, {7000, 1234}, {1'500'000, -1'499'000}, {3, 2'000'000}};
    for (const auto& c : cases) {
      std::vector<float> x(heads * d);
      for (float& v : x) v = nd(rng);
      std::vector<float> a = x, b = x;
      const int32_t pa = c[0], sum = c[0] + c[1];
      rope(a.data(), &pa, 1, heads, d, d, 10000.0f, mode);
      rot.rotate(a.data(), heads, c[1]);
      rope(b.data(), &sum, 1, heads, d, d, 10000.0f, mode);
      for (int i = 0; i < heads * d; ++i) {
        EXPECT_NEAR(a[i], b[i], 2e-4f) << "d " << d << " pos " << pa << " offset " << c[1] << " i " << i;
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
void check_activation(void (*fn)(float*, const float*, int64_t), double (*ref)(double), const char* name) {
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

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }
double gelu_ref(double g) { return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * g * (1.0 + 0.044715 * g * g))); }

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
        EXPECT_NEAR(out[r * n + i], want, 1e-5 * std::max(1.0, std::abs(want))) << "n " << n << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace sieve

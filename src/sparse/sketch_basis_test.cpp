#include "sparse/sketch_basis.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "sparse/policy.h"
#include "sparse/sketch.h"

namespace sieve {
namespace {

// Keys that live in a 4-dim subspace of 16 dims (a random orthonormal-free mixing).
std::vector<float> low_rank_keys(int n, int d, int r, std::mt19937& rng) {
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> mix(static_cast<size_t>(r) * d);
  for (auto& x : mix) x = nd(rng);
  std::vector<float> k(static_cast<size_t>(n) * d, 0.0f);
  for (int t = 0; t < n; ++t) {
    for (int a = 0; a < r; ++a) {
      const float c = nd(rng) * (a + 1);
      for (int i = 0; i < d; ++i)
        k[static_cast<size_t>(t) * d + i] += c * mix[static_cast<size_t>(a) * d + i];
    }
  }
  return k;
}

TEST(SketchBasis, PcaOfLowRankKeysKeepsTheirDotProductsExactly) {
  const int d = 16, r = 4, n = 300, L = 2, H = 2;
  std::mt19937 rng(5);
  KeyMoments m(L, H, d);
  std::vector<std::vector<float>> keys;
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      keys.push_back(low_rank_keys(n, d, r, rng));
      m.add(l, h, keys.back().data(), n);
    }
  }
  const SketchBasis b = m.fit(r);
  ASSERT_EQ(b.dim, r);
  for (int l = 0; l < L; ++l) EXPECT_EQ(b.fitted[l], 1);
  for (double c : b.captured) EXPECT_NEAR(c, 1.0, 1e-9);

  SketchSpec spec;
  spec.head_dim = d;
  spec.dim = r;
  spec.n_kv_head = H;
  spec.shared = false;
  spec.basis_path = "mem";
  spec.basis = std::make_shared<const SketchBasis>(b);
  const SketchProjection proj(spec);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(d), qs(r), ks(r);
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      const std::vector<float>& k = keys[static_cast<size_t>(l) * H + h];
      for (auto& x : q) x = nd(rng);
      proj.project(q.data(), l, h, qs.data());
      for (int t = 0; t < 20; ++t) {
        const float* kt = k.data() + static_cast<size_t>(t) * d;
        proj.project(kt, l, h, ks.data());
        double exact = 0, sketched = 0;
        for (int i = 0; i < d; ++i) exact += static_cast<double>(q[i]) * kt[i];
        for (int c = 0; c < r; ++c) sketched += static_cast<double>(qs[c]) * ks[c];
        EXPECT_NEAR(sketched, exact, 1e-3 * (1 + std::fabs(exact)))
            << "layer " << l << " head " << h << " key " << t;
      }
    }
  }
  // Another (layer, head)'s basis does not reproduce these keys' scores: the lookup is per unit.
  proj.project(q.data(), 0, 1, qs.data());
  const float* k0 = keys[0].data();
  proj.project(k0, 0, 1, ks.data());
  double exact = 0, other = 0;
  for (int i = 0; i < d; ++i) exact += static_cast<double>(q[i]) * k0[i];
  for (int c = 0; c < r; ++c) other += static_cast<double>(qs[c]) * ks[c];
  EXPECT_GT(std::fabs(other - exact), 1e-3);
}

TEST(SketchBasis, LayersWithoutKeysAreNotFitted) {
  KeyMoments m(3, 1, 8);
  std::vector<float> k(8 * 10, 1.0f);
  m.add(1, 0, k.data(), 10);
  const SketchBasis b = m.fit(2);
  EXPECT_EQ(b.fitted, (std::vector<uint8_t>{0, 1, 0}));
}

std::string temp_path(const char* name) {
  return ::testing::TempDir() + name;
}

TEST(SketchBasis, SavesAndLoadsExactly) {
  std::mt19937 rng(9);
  KeyMoments m(2, 1, 8);
  const auto k = low_rank_keys(50, 8, 3, rng);
  m.add(0, 0, k.data(), 50);
  m.add(1, 0, k.data(), 50);
  SketchBasis b = m.fit(3);
  b.model_name = "tiny";
  const std::string path = temp_path("basis_roundtrip.json");
  ASSERT_TRUE(save_sketch_basis(b, path).ok());
  auto back = load_sketch_basis(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->p, b.p);
  EXPECT_EQ(back->fitted, b.fitted);
  EXPECT_EQ(back->dim, 3);
  EXPECT_EQ(back->model_name, "tiny");
}

TEST(SketchBasis, BadFilesAreRejectedWithTheFieldNamed) {
  EXPECT_NE(load_sketch_basis("/nonexistent/basis.json").message().find("cannot read"),
            std::string::npos);
  auto write = [](const std::string& text) {
    const std::string path = temp_path("basis_bad.json");
    std::ofstream(path) << text;
    return load_sketch_basis(path);
  };
  EXPECT_NE(write("{not json").message().find("not JSON"), std::string::npos);
  EXPECT_NE(write(R"({"format":"other"})").message().find("format"), std::string::npos);
  const std::string head =
      R"({"format":"sieve-sketch-basis","version":1,"n_layer":1,"n_kv_head":1,"head_dim":2,)";
  EXPECT_NE(write(head + R"("dim":3,"fitted":[1],"captured":[1],"p":[]})").message().find("dim"),
            std::string::npos);
  EXPECT_NE(write(head + R"("dim":1,"fitted":[1],"captured":[1],"p":[1]})").message().find("'p'"),
            std::string::npos);
  EXPECT_NE(
      write(head + R"("dim":1,"fitted":[1],"captured":[1],"p":[1,null]})").message().find("'p'"),
      std::string::npos);
  EXPECT_NE(
      write(head + R"("dim":1,"fitted":[0],"captured":[1],"p":[1,0]})").message().find("no layer"),
      std::string::npos);
  EXPECT_TRUE(write(head + R"("dim":1,"fitted":[1],"captured":[1],"p":[1,0]})").ok());
  // sketch_basis_fuzz: a field of the wrong type threw json::type_error out of the loader
  // (a duplicate "format" key holding an array), and 1e300 was cast to an integer.
  EXPECT_NE(write(R"({"format":"sieve-sketch-basis","format":[0]})").message().find("format"),
            std::string::npos);
  EXPECT_NE(write(head + R"("dim":1,"fitted":[1e300],"captured":[1],"p":[1,0]})")
                .message()
                .find("fitted"),
            std::string::npos);
  EXPECT_NE(
      write(head + R"("dim":1,"fitted":[2],"captured":[1],"p":[1,0]})").message().find("fitted"),
      std::string::npos);
  EXPECT_NE(write(head + R"("dim":1,"fitted":[1],"captured":[1],"p":[1,0],"tokens":1e300})")
                .message()
                .find("tokens"),
            std::string::npos);
  EXPECT_NE(write(head + R"("dim":1,"fitted":[1],"captured":[1],"p":[1,0],"model":5})")
                .message()
                .find("'model'"),
            std::string::npos);
  EXPECT_NE(write(head + R"("dim":1,"fitted":[1],"captured":[1],"p":[1,0],"model":{"name":[]}})")
                .message()
                .find("'model.name'"),
            std::string::npos);
  // sketch_basis_fuzz (CI, 2026-12-07): a number past double's range made the parser throw
  // json::out_of_range out of the loader; one past float's range in 'p' must not be cast.
  EXPECT_NE(write("[8e8888]").message().find("not JSON"), std::string::npos);
  EXPECT_NE(
      write(head + R"("dim":1,"fitted":[1],"captured":[1],"p":[1,1e300]})").message().find("'p'"),
      std::string::npos);
}

TEST(SketchBasis, PolicyKnobLoadsTheFileOrNamesIt) {
  auto p = make_policy("sketch");
  ASSERT_TRUE(p.ok());
  PolicyConfig cfg = *p;
  const Status bad = set_policy_knob(cfg, "sketch_basis", "/nonexistent/basis.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("/nonexistent/basis.json"), std::string::npos);
}

}  // namespace
}  // namespace sieve

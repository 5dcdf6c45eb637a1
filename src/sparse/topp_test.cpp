// Sort-free top-p against a plain sort-based reference: the same set (ties to the lower
// index) on random vectors of awkward shapes and on real attention rows of SmolLM2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "sparse/select.h"
#include "sparse/topp.h"

namespace sieve {
namespace {

// The definition in topp.h, by sorting: (score desc, index asc), the smallest prefix whose
// mass reaches share * total (none for a share <= 0, all with no mass), then floor and cap.
std::vector<int32_t> reference_share(const std::vector<float>& s, double share, int32_t min_keep,
                                     int32_t max_keep) {
  const int32_t n = static_cast<int32_t>(s.size());
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  double total = 0;
  for (float x : s) total += std::max(0.0f, x);
  int32_t m = n;
  if (!(share > 0)) {
    m = 0;
  } else if (total > 0) {
    const double target = std::min(share, 1.0) * total * (1.0 - kTopPSlack);
    double acc = 0;
    m = 0;
    while (m < n && acc < target) acc += std::max(0.0f, s[order[m++]]);
  }
  const int32_t cap = max_keep > 0 ? std::min(max_keep, n) : n;
  const int32_t want = std::min(std::max(m, std::min(min_keep, n)), cap);
  order.resize(want);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<int32_t> reference_top_p(const std::vector<float>& s, const TopPParams& prm) {
  return reference_share(s, prm.p, prm.min_keep, prm.max_keep);
}

double mass_of(const std::vector<float>& s, const std::vector<int32_t>& idx) {
  double m = 0;
  for (int32_t j : idx) m += std::max(0.0f, s[j]);
  return m;
}

// Compares with the reference and checks the set reaches the mass.
void expect_matches(const std::vector<float>& s, const TopPParams& prm, const std::string& what) {
  const std::vector<int32_t> got = top_p_select(s, prm);
  const std::vector<int32_t> ref = reference_top_p(s, prm);
  ASSERT_EQ(got.size(), ref.size()) << what;
  EXPECT_EQ(got, ref) << what;
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << what;
  double total = 0;
  for (float x : s) total += std::max(0.0f, x);
  const bool capped = prm.max_keep > 0 && static_cast<int32_t>(got.size()) == prm.max_keep;
  if (total > 0 && prm.p > 0 && !capped) {
    EXPECT_GE(mass_of(s, got), prm.p * total * (1 - kTopPSlack)) << what;
  }
}

enum class Dist { uniform, power_law, ties, all_equal, sparse_zeros, softmax_peaked };

std::vector<float> make_scores(Dist dist, int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> s(n);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  switch (dist) {
    case Dist::uniform:
      for (float& x : s) x = u(rng);
      break;
    case Dist::power_law:  // Pareto tail: a few tokens carry most of the mass
      for (float& x : s) x = std::pow(1.0f - u(rng) * 0.999999f, -2.5f);
      break;
    case Dist::ties:
      for (float& x : s) x = static_cast<float>(rng() % 7) * 0.125f;
      break;
    case Dist::all_equal:
      std::fill(s.begin(), s.end(), 0.3f);
      break;
    case Dist::sparse_zeros:  // mostly zero mass, a few negatives
      for (float& x : s) {
        const uint32_t r = rng() % 10;
        x = r < 6 ? 0.0f : r < 7 ? -u(rng) : u(rng) * 1e-3f;
      }
      break;
    case Dist::softmax_peaked: {
      std::normal_distribution<float> nd(0.0f, 4.0f);
      float m = -1e30f;
      for (float& x : s) m = std::max(m, x = nd(rng));
      double t = 0;
      for (float& x : s) t += x = std::exp(x - m);
      for (float& x : s) x = static_cast<float>(x / t);
      break;
    }
  }
  return s;
}

TEST(TopP, MatchesSortReferenceOnRandomVectors) {
  const Dist dists[] = {Dist::uniform,   Dist::power_law,    Dist::ties,
                        Dist::all_equal, Dist::sparse_zeros, Dist::softmax_peaked};
  const int32_t sizes[] = {1, 2, 3, 17, 97, 256, 257, 1000, 4099, 65537};
  const float ps[] = {1e-6f, 0.01f, 0.5f, 0.9f, 0.95f, 0.999f, 1.0f};
  uint32_t seed = 1;
  for (Dist d : dists) {
    for (int32_t n : sizes) {
      const std::vector<float> s = make_scores(d, n, seed++);
      for (float p : ps) {
        TopPParams prm;
        prm.p = p;
        expect_matches(s, prm,
                       "dist " + std::to_string(static_cast<int>(d)) + " n " + std::to_string(n) +
                           " p " + std::to_string(p));
      }
    }
  }
}

// The floor and the cap, also where level 0 alone decides them (a cap far below the top-p
// count, a floor far above it) and with a floor above the cap (the cap wins).
TEST(TopP, FloorAndCap) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 3000);
    const std::vector<float> s = make_scores(static_cast<Dist>(trial % 6), n, 100 + trial);
    TopPParams prm;
    prm.p = (rng() % 1000) / 1000.0f + 0.0005f;
    prm.min_keep = static_cast<int32_t>(rng() % (n + 5));
    prm.max_keep = trial % 3 == 0 ? 0 : static_cast<int32_t>(rng() % (n + 5));
    if (trial % 4 != 1 && prm.max_keep > 0 && prm.max_keep < prm.min_keep)
      std::swap(prm.max_keep, prm.min_keep);
    if (trial % 8 == 2) prm.max_keep = 1 + static_cast<int32_t>(rng() % 8);
    if (trial % 8 == 6) prm.min_keep = n - static_cast<int32_t>(rng() % 3);
    expect_matches(s, prm, "trial " + std::to_string(trial));
  }
}

// top_p_select_beyond by sorting: the kept tokens' mass `fixed` counts toward p, so the
// candidates need share = (p (fixed + total) - fixed) / total of their own mass; none beyond
// the floor when the kept tokens hold p already.
std::vector<int32_t> reference_beyond(const std::vector<float>& s, double fixed,
                                      const TopPParams& prm) {
  double total = 0;
  for (float x : s) total += std::max(0.0f, x);
  if (!(total > 0)) return reference_top_p(s, prm);
  const double share = (std::min(double{prm.p}, 1.0) * (fixed + total) - fixed) / total;
  return reference_share(s, share, prm.min_keep, prm.max_keep);
}

// With kept tokens beside the candidates: the same set as the sort-based reference, the
// kept mass plus the set's reaching p of the whole, no fixed mass = plain top-p, and kept
// tokens that hold p already leave only the floor.
TEST(TopP, BeyondKeptTokensMatchesSortReference) {
  std::mt19937 rng(5);
  TopPScratch sc;
  std::vector<int32_t> got;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 5000);
    const std::vector<float> s = make_scores(static_cast<Dist>(trial % 6), n, 900 + trial);
    double total = 0;
    for (float x : s) total += std::max(0.0f, x);
    TopPParams prm;
    prm.p = (rng() % 1000) / 1000.0f + 0.0005f;
    prm.min_keep = trial % 3 == 0 ? static_cast<int32_t>(rng() % 20) : 0;
    prm.max_keep = trial % 5 == 0 ? 1 + static_cast<int32_t>(rng() % (n + 5)) : 0;
    const double fixed =
        trial % 4 == 0 ? 0.0 : total * ((rng() % 1000) / 250.0);  // 0 to 4x the candidates
    const std::string what = "trial " + std::to_string(trial) + " n " + std::to_string(n);
    top_p_select_beyond(s.data(), n, fixed, prm, got, sc);
    EXPECT_EQ(got, reference_beyond(s, fixed, prm)) << what;
    if (fixed == 0.0) {
      EXPECT_EQ(got, reference_top_p(s, prm)) << what;
    }
    const bool capped = prm.max_keep > 0 && static_cast<int32_t>(got.size()) == prm.max_keep;
    if (total > 0 && !capped) {
      EXPECT_GE(fixed + mass_of(s, got), prm.p * (fixed + total) * (1 - 2 * kTopPSlack)) << what;
    }
  }
  // Kept tokens holding 0.95 of the mass, p 0.9: only the floor.
  const std::vector<float> s = make_scores(Dist::uniform, 1000, 3);
  double total = 0;
  for (float x : s) total += x;
  TopPParams prm;
  prm.p = 0.9f;
  prm.min_keep = 7;
  top_p_select_beyond(s.data(), 1000, 19.0 * total, prm, got, sc);
  prm.min_keep = 0;
  prm.max_keep = 7;
  prm.p = 1.0f;
  EXPECT_EQ(got, reference_top_p(s, prm));
  EXPECT_EQ(got.size(), 7u);
}

TEST(TopP, SmallCasesByHand) {
  const std::vector<float> s = {0.05f, 0.5f, 0.1f, 0.3f, 0.05f};
  auto pick = [&](float p, int32_t lo, int32_t hi) {
    return top_p_select(s, TopPParams{p, lo, hi});
  };
  EXPECT_EQ(pick(0.5f, 0, 0), (std::vector<int32_t>{1}));
  EXPECT_EQ(pick(0.8f, 0, 0), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(pick(0.85f, 0, 0), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(pick(1.0f, 0, 0), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(pick(0.5f, 3, 0), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(pick(0.99f, 0, 2), (std::vector<int32_t>{1, 3}));
  // the tie between 0 and 4 goes to the lower index
  EXPECT_EQ(pick(0.92f, 0, 0), (std::vector<int32_t>{0, 1, 2, 3}));
  // n = 1 and an empty vector
  EXPECT_EQ(top_p_select(std::vector<float>{2.0f}, TopPParams{0.1f, 0, 0}),
            (std::vector<int32_t>{0}));
  EXPECT_TRUE(top_p_select(std::vector<float>{}, TopPParams{0.9f, 0, 0}).empty());
  // all zero: no mass to rank by, the cap decides
  const std::vector<float> z(10, 0.0f);
  EXPECT_EQ(top_p_select(z, TopPParams{0.9f, 0, 4}).size(), 4u);
  EXPECT_EQ(top_p_select(z, TopPParams{0.9f, 0, 0}).size(), 10u);
}

TEST(TopP, CutDescribesTheSet) {
  const std::vector<float> s = make_scores(Dist::power_law, 5000, 3);
  TopPScratch sc;
  const TopPCut cut = top_p_cut(s.data(), 5000, TopPParams{0.9f, 0, 0}, sc);
  std::vector<int32_t> out;
  emit_cut(s.data(), 5000, cut, out);
  EXPECT_EQ(static_cast<int32_t>(out.size()), cut.count);
  EXPECT_NEAR(mass_of(s, out), cut.mass, 1e-9 * cut.total);
  EXPECT_GE(cut.mass, 0.9 * cut.total * (1 - kTopPSlack));
  // removing the lightest selected token falls short of the target: minimal
  float lightest = 1e30f;
  for (int32_t j : out) lightest = std::min(lightest, s[j]);
  EXPECT_LT(cut.mass - lightest, 0.9 * cut.total * (1 - kTopPSlack));
}

TEST(TopP, TopKCutIsExactTopK) {
  std::mt19937 rng(5);
  TopPScratch sc;
  for (int trial = 0; trial < 100; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 2000),
                  k = static_cast<int32_t>(rng() % (n + 2));
    const std::vector<float> s = make_scores(static_cast<Dist>(trial % 6), n, 500 + trial);
    std::vector<int32_t> ref(n);
    std::iota(ref.begin(), ref.end(), 0);
    std::stable_sort(ref.begin(), ref.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    ref.resize(std::min(k, n));
    std::sort(ref.begin(), ref.end());
    std::vector<int32_t> got;
    emit_cut(s.data(), n, top_k_cut(s.data(), n, k, sc), got);
    EXPECT_EQ(got, ref) << "trial " << trial;
    // The same set from the descent's own lists, and the floor-only top-p (p = 0) with the
    // set's mass and the row's total, which the count descent leaves to its caller.
    top_k_select(s.data(), n, k, got, sc);
    EXPECT_EQ(got, ref) << "trial " << trial;
    const TopPCut cut = top_p_cut(s.data(), n, TopPParams{0.0f, k, 0}, sc);
    double mass = 0, total = 0;
    for (int32_t j : ref) mass += std::max(0.0f, s[j]);
    for (float x : s) total += std::max(0.0f, x);
    EXPECT_EQ(cut.count, static_cast<int32_t>(ref.size())) << "trial " << trial;
    EXPECT_NEAR(cut.mass, mass, 1e-9 * total + 1e-30) << "trial " << trial;
    EXPECT_NEAR(cut.total, total, 1e-9 * total + 1e-30) << "trial " << trial;
  }
}

TEST(TopP, LogitsEqualTheSoftmaxMasses) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(3001);
  for (float& x : logits) x = nd(rng);
  const float scale = 0.125f;
  std::vector<float> prob(logits.size());
  for (size_t j = 0; j < logits.size(); ++j) prob[j] = std::exp(scale * logits[j]);
  TopPScratch sc;
  std::vector<int32_t> got;
  top_p_select_logits(logits.data(), 3001, scale, TopPParams{0.9f, 0, 0}, got, sc);
  EXPECT_EQ(got, reference_top_p(sc.mass, TopPParams{0.9f, 0, 0}));
  // the same tokens as the top-|got| logits
  std::vector<int32_t> ref(logits.size());
  std::iota(ref.begin(), ref.end(), 0);
  std::stable_sort(ref.begin(), ref.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  ref.resize(got.size());
  std::sort(ref.begin(), ref.end());
  EXPECT_EQ(got, ref);
}

// Real attention rows (tests/fixtures/attention_rows_smollm2.txt, written by
// `sieve calibrate --dump-rows`): one line per row, "layer head n" then n probabilities.
TEST(TopP, MatchesSortReferenceOnRealAttentionRows) {
  std::ifstream in(std::string(SIEVE_SOURCE_DIR) + "/tests/fixtures/attention_rows_smollm2.txt");
  ASSERT_TRUE(in) << "missing fixture";
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    int layer = 0, head = 0, n = 0;
    ls >> layer >> head >> n;
    std::vector<float> s(n);
    for (float& x : s) ls >> x;
    ASSERT_TRUE(ls) << "row " << rows;
    for (float p : {0.5f, 0.9f, 0.95f, 0.99f}) {
      expect_matches(s, TopPParams{p, 0, 0},
                     "layer " + std::to_string(layer) + " head " + std::to_string(head));
      expect_matches(s, TopPParams{p, 16, 256}, "capped layer " + std::to_string(layer));
    }
    ++rows;
  }
  EXPECT_GE(rows, 4);
}

// pick_tokens' top-p (token granularity) is this selection.
TEST(TopP, PickTokensUsesIt) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 3000);
    const std::vector<float> s = make_scores(static_cast<Dist>(trial % 6), n, 900 + trial);
    const TopPParams prm{0.05f + (rng() % 95) / 100.0f, static_cast<int32_t>(rng() % 50),
                         trial % 2 ? 0 : 1 + static_cast<int32_t>(rng() % n)};
    EXPECT_EQ(pick_tokens(s.data(), n, prm.max_keep, prm.p, prm.min_keep, 1),
              reference_top_p(s, prm))
        << "trial " << trial;
  }
}

}  // namespace
}  // namespace sieve

// The analysis functions of `sieve analyze` against brute-force references on random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "backend/cpu/ops.h"
#include "sparse/analysis.h"

namespace sieve {
namespace {

// A random query in one layer with everything every method needs.
struct Instance {
  int32_t H = 0, Hkv = 0, n = 0, d = 0;
  float scale = 0;
  std::vector<float> q, k, logits, prob, sketch, bound, history;
  LayerQuery lq() const {
    LayerQuery l;
    l.n_head = H;
    l.n_head_kv = Hkv;
    l.n = n;
    l.scale = scale;
    l.logits = logits.data();
    l.prob = prob.data();
    l.sketch_logits = sketch.data();
    l.quest_bound = bound.data();
    l.quest_block = 16;
    l.history = history.data();
    return l;
  }
};

Instance make_instance(uint32_t seed, int32_t H, int32_t Hkv, int32_t n, int32_t d) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Instance in;
  in.H = H, in.Hkv = Hkv, in.n = n, in.d = d;
  in.scale = 1.0f / std::sqrt(static_cast<float>(d));
  in.q.resize(static_cast<size_t>(H) * d);
  in.k.resize(static_cast<size_t>(Hkv) * n * d);
  // Heads with different loudness (query norms 1x..8x), as real models have.
  for (int32_t h = 0; h < H; ++h) {
    for (int32_t c = 0; c < d; ++c) in.q[h * d + c] = nd(rng) * static_cast<float>(1 << (h % 4));
  }
  for (float& x : in.k) x = nd(rng);
  in.logits.resize(static_cast<size_t>(H) * n);
  in.prob.resize(in.logits.size());
  const int32_t G = H / Hkv;
  for (int32_t h = 0; h < H; ++h) {
    double m = -1e300, s = 0;
    for (int32_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int32_t c = 0; c < d; ++c)
        dot += double{in.q[h * d + c]} * in.k[(int64_t{h / G} * n + j) * d + c];
      in.logits[int64_t{h} * n + j] = static_cast<float>(dot);
      m = std::max(m, dot * in.scale);
    }
    for (int32_t j = 0; j < n; ++j)
      s += std::exp(in.logits[int64_t{h} * n + j] * double{in.scale} - m);
    for (int32_t j = 0; j < n; ++j) {
      in.prob[int64_t{h} * n + j] =
          static_cast<float>(std::exp(in.logits[int64_t{h} * n + j] * double{in.scale} - m) / s);
    }
  }
  // "sketch" logits: the exact ones plus noise (the selection code only sees the rows).
  in.sketch = in.logits;
  for (float& x : in.sketch) x += 2.0f * nd(rng);
  const int32_t B = 16, nb = (n + B - 1) / B;
  in.bound.resize(static_cast<size_t>(H) * nb);
  std::vector<float> mn(static_cast<size_t>(nb) * d), mx(mn.size());
  for (int32_t h = 0; h < H; ++h) {
    block_min_max(in.k.data() + int64_t{h / G} * n * d, n, d, B, mn.data(), mx.data());
    for (int32_t b = 0; b < nb; ++b) {
      in.bound[int64_t{h} * nb + b] =
          quest_bound(in.q.data() + h * d, mn.data() + b * d, mx.data() + b * d, d);
    }
  }
  in.history.resize(n);
  for (float& x : in.history) x = std::fabs(nd(rng));
  return in;
}

// Top-k indices of v (descending value, ties to the lower index), as a set.
std::set<int32_t> top_set(const std::vector<double>& v, int32_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  idx.resize(std::min<size_t>(k, idx.size()));
  return {idx.begin(), idx.end()};
}

// Reference of every method for heads [h0, h1), written from the definitions.
std::set<int32_t> reference_keys(const Instance& in, AnalysisMethod m, const BudgetSplit& s,
                                 int32_t h0, int32_t h1) {
  const int32_t n = in.n;
  std::set<int32_t> out;
  auto add_range = [&](int32_t a, int32_t b) {
    for (int32_t j = a; j < b; ++j) out.insert(j);
  };
  if (m == AnalysisMethod::oracle) {
    std::vector<double> sum(n, 0.0);
    for (int32_t h = h0; h < h1; ++h) {
      for (int32_t j = 0; j < n; ++j) sum[j] += in.prob[int64_t{h} * n + j];
    }
    return top_set(sum, s.budget);
  }
  if (m == AnalysisMethod::streaming) {
    add_range(0, s.sinks);
    add_range(n - (s.budget - s.sinks), n);
    return out;
  }
  const int32_t c0 = s.sinks, c1 = n - s.local, nm = c1 - c0;
  add_range(0, c0);
  add_range(c1, n);
  std::vector<double> score(nm, 0.0);
  auto softmax_sum = [&](const std::vector<float>& rows) {
    for (int32_t h = h0; h < h1; ++h) {
      double mx = -1e300, z = 0;
      for (int32_t j = 0; j < nm; ++j)
        mx = std::max(mx, double{in.scale} * rows[int64_t{h} * n + c0 + j]);
      for (int32_t j = 0; j < nm; ++j)
        z += std::exp(double{in.scale} * rows[int64_t{h} * n + c0 + j] - mx);
      for (int32_t j = 0; j < nm; ++j)
        score[j] += std::exp(double{in.scale} * rows[int64_t{h} * n + c0 + j] - mx) / z;
    }
  };
  switch (m) {
    case AnalysisMethod::tokenselect:
    case AnalysisMethod::tokenselect_group:
      softmax_sum(in.logits);
      break;
    case AnalysisMethod::sketch:
      softmax_sum(in.sketch);
      break;
    case AnalysisMethod::raw_sum:
      for (int32_t h = h0; h < h1; ++h) {
        for (int32_t j = 0; j < nm; ++j) score[j] += in.scale * in.logits[int64_t{h} * n + c0 + j];
      }
      break;
    case AnalysisMethod::hard_vote: {
      // votes first, the soft vote only breaks ties between equal vote counts
      std::vector<double> soft(nm, 0.0);
      std::swap(score, soft);
      softmax_sum(in.logits);
      std::swap(score, soft);
      for (int32_t h = h0; h < h1; ++h) {
        std::vector<double> row(nm);
        for (int32_t j = 0; j < nm; ++j) row[j] = in.logits[int64_t{h} * n + c0 + j];
        for (int32_t j : top_set(row, s.top_k)) score[j] += 1.0;
      }
      for (int32_t j = 0; j < nm; ++j) score[j] += soft[j] / (h1 - h0 + 1);
      break;
    }
    case AnalysisMethod::h2o:
      for (int32_t j = 0; j < nm; ++j) score[j] = in.history[c0 + j];
      break;
    case AnalysisMethod::quest: {
      // blocks of 16 at absolute positions, clipped to the middle, filled in rank order
      const int32_t nb = (n + 15) / 16;
      std::vector<std::pair<double, int32_t>> blocks;
      for (int32_t b = c0 / 16; b < (c1 + 15) / 16; ++b) {
        double bs = 0;
        for (int32_t h = h0; h < h1; ++h) bs += double{in.scale} * in.bound[int64_t{h} * nb + b];
        blocks.push_back({-bs, b});
      }
      std::sort(blocks.begin(), blocks.end());
      int32_t taken = 0;
      for (const auto& [neg, b] : blocks) {
        for (int32_t j = std::max(c0, b * 16); j < std::min(c1, b * 16 + 16) && taken < s.top_k;
             ++j, ++taken) {
          out.insert(j);
        }
      }
      return out;
    }
    default:
      ADD_FAILURE();
  }
  for (int32_t j : top_set(score, s.top_k)) out.insert(c0 + j);
  return out;
}

TEST(Analysis, SplitBudgetFollowsTokenSelectProportions) {
  BudgetSplit s = split_budget(2688, 100000);
  EXPECT_EQ(s.budget, 2688);
  EXPECT_EQ(s.sinks, 128);
  EXPECT_EQ(s.top_k, 2048);
  EXPECT_EQ(s.local, 512);
  s = split_budget(256, 4000);
  EXPECT_EQ(s.sinks, 12);
  EXPECT_EQ(s.local, 49);
  EXPECT_EQ(s.top_k, 195);
  s = split_budget(2688, 100);  // clamped to the context
  EXPECT_EQ(s.budget, 100);
  EXPECT_EQ(s.sinks + s.top_k + s.local, 100);
  s = split_budget(64, 1000, 4, 100);  // explicit parts that do not fit: the window shrinks
  EXPECT_EQ(s.sinks, 4);
  EXPECT_EQ(s.local, 60);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_EQ(scaled_budget(2688, 4096), 2048);
  EXPECT_EQ(scaled_budget(2688, 8192), 2688);
  EXPECT_EQ(scaled_budget(256, 4096), 256);
  EXPECT_EQ(scaled_budget(10, 1), 1);
}

TEST(Analysis, EveryMethodEqualsItsBruteForceReference) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const int32_t H = seed % 2 ? 6 : 4, Hkv = 2, n = 150 + 97 * seed, d = 16;
    const Instance in = make_instance(seed, H, Hkv, n, d);
    const LayerQuery lq = in.lq();
    for (int32_t budget : {40, 77, 130}) {
      const BudgetSplit s = split_budget(budget, n, seed % 3 ? -1 : 4, seed % 3 ? -1 : 9);
      for (AnalysisMethod m : analysis_methods()) {
        const int32_t h1 = m == AnalysisMethod::tokenselect_group ? H / Hkv : H;  // group 0
        const std::vector<int32_t> got = select_keys(lq, m, s, 0, h1);
        ASSERT_TRUE(std::is_sorted(got.begin(), got.end()));
        ASSERT_EQ(std::adjacent_find(got.begin(), got.end()), got.end()) << "duplicates";
        EXPECT_EQ(static_cast<int32_t>(got.size()), s.budget) << method_name(m);
        const std::set<int32_t> want = reference_keys(in, m, s, 0, h1);
        EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()), want)
            << method_name(m) << " seed " << seed << " budget " << budget;
      }
    }
  }
}

TEST(Analysis, OracleBoundsEverySharedSetAndFullBudgetRecallsEverything) {
  for (uint32_t seed = 10; seed < 16; ++seed) {
    const Instance in = make_instance(seed, 8, 2, 400 + seed, 32);
    const LayerQuery lq = in.lq();
    for (int32_t budget : {16, 64, 200}) {
      const BudgetSplit s = split_budget(budget, in.n);
      const double oracle = method_recall(lq, AnalysisMethod::oracle, s);
      EXPECT_GT(oracle, 0.0);
      for (AnalysisMethod m : analysis_methods()) {
        const double r = method_recall(lq, m, s);
        EXPECT_GE(r, 0.0);
        EXPECT_LE(r, 1.0 + 1e-6);
        // One shared set can not beat the top-B of the summed attention; per-group sets can.
        if (m != AnalysisMethod::tokenselect_group) {
          EXPECT_LE(r, oracle + 1e-6) << method_name(m);
        }
      }
    }
    const BudgetSplit all = split_budget(in.n, in.n);
    for (AnalysisMethod m : analysis_methods()) {
      EXPECT_NEAR(method_recall(lq, m, all), 1.0, 1e-5) << method_name(m);
    }
  }
}

TEST(Analysis, GroupScopeScoresEachHeadAgainstItsGroupsSet) {
  const Instance in = make_instance(21, 6, 3, 333, 16);
  const LayerQuery lq = in.lq();
  const BudgetSplit s = split_budget(50, in.n);
  double want = 0;
  for (int32_t g = 0; g < 3; ++g) {
    const std::set<int32_t> keys =
        reference_keys(in, AnalysisMethod::tokenselect_group, s, 2 * g, 2 * g + 2);
    for (int32_t h = 2 * g; h < 2 * g + 2; ++h) {
      for (int32_t j : keys) want += in.prob[int64_t{h} * in.n + j];
    }
  }
  EXPECT_NEAR(method_recall(lq, AnalysisMethod::tokenselect_group, s), want / 6, 1e-6);
}

TEST(Analysis, MassRecallSumsTheKeptAttention) {
  // two heads over 5 keys
  const std::vector<float> p = {0.5f, 0.1f, 0.1f, 0.2f, 0.1f, /**/ 0.0f, 0.0f, 0.7f, 0.3f, 0.0f};
  const std::vector<int32_t> keys = {0, 3};
  EXPECT_NEAR(mass_recall(p.data(), 5, 0, 2, keys), (0.7 + 0.3) / 2, 1e-7);
  EXPECT_NEAR(mass_recall(p.data(), 5, 1, 2, keys), 0.3, 1e-7);
}

// Raw logits of a loud head drown the quiet heads; the soft vote gives every head one vote.
TEST(Analysis, SoftVoteKeepsQuietHeadsThatRawSumDrowns) {
  const int32_t H = 4, n = 200;
  Instance in;
  in.H = H, in.Hkv = 1, in.n = n, in.scale = 1.0f;
  in.logits.assign(static_cast<size_t>(H) * n, 0.0f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int32_t j = 0; j < n; ++j) in.logits[j] = 100.0f * u(rng);  // loud, flat-ish head 0
  for (int32_t h = 1; h < H; ++h) in.logits[int64_t{h} * n + 50 + h] = 12.0f;  // peaked quiet heads
  in.prob.resize(in.logits.size());
  for (int32_t h = 0; h < H; ++h) {
    double m = -1e300, z = 0;
    for (int32_t j = 0; j < n; ++j) m = std::max(m, double{in.logits[int64_t{h} * n + j]});
    for (int32_t j = 0; j < n; ++j) z += std::exp(in.logits[int64_t{h} * n + j] - m);
    for (int32_t j = 0; j < n; ++j)
      in.prob[int64_t{h} * n + j] =
          static_cast<float>(std::exp(in.logits[int64_t{h} * n + j] - m) / z);
  }
  LayerQuery lq;
  lq.n_head = H, lq.n_head_kv = 1, lq.n = n, lq.scale = 1.0f;
  lq.logits = in.logits.data();
  lq.prob = in.prob.data();
  const BudgetSplit s = split_budget(12, n, 0, 0);
  const double soft = method_recall(lq, AnalysisMethod::tokenselect, s);
  const double raw = method_recall(lq, AnalysisMethod::raw_sum, s);
  EXPECT_GT(soft, raw + 0.3);
  EXPECT_GT(soft, 0.9);
}

TEST(Analysis, PickBlocksTakesRankedBlocksUpToExactlyK) {
  // blocks of 4 over [2, 19): blocks 0..4 clipped; scores rank 3, 1, 4, 0, 2
  const std::vector<float> bs = {0.5f, 3.0f, 0.1f, 9.0f, 2.0f};
  const std::vector<int32_t> got = pick_blocks(bs.data(), 4, 2, 19, 9);
  // block 3: 12..15 (4), block 1: 4..7 (4), block 4: 16..18 clipped, first 1 token -> 16
  const std::vector<int32_t> want = {4, 5, 6, 7, 12, 13, 14, 15, 16};
  EXPECT_EQ(got, want);
  EXPECT_EQ(pick_blocks(bs.data(), 4, 2, 19, 100).size(), 17u);
  EXPECT_TRUE(pick_blocks(bs.data(), 4, 2, 19, 0).empty());
  // block 0 clipped to [2, 4): two tokens
  const std::vector<float> first = {9.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(pick_blocks(first.data(), 4, 2, 19, 3), (std::vector<int32_t>{2, 3, 4}));
}

TEST(Analysis, BlockRecallEqualsBruteForceAndIsOneAtTokenLevel) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    std::exponential_distribution<float> ex(1.0f);
    const int32_t n = 500 + 131 * seed;
    std::vector<float> score(n);
    for (float& x : score) x = std::pow(ex(rng), 3.0f);  // heavy tail: few critical tokens
    const int32_t k = n / 4;
    EXPECT_DOUBLE_EQ(block_recall(score.data(), n, k, 1), 1.0);
    for (int32_t block : {8, 16, 64, 128}) {
      std::vector<double> sd(score.begin(), score.end());
      const std::set<int32_t> critical = top_set(sd, k);
      std::vector<double> bsum((n + block - 1) / block, 0.0);
      for (int32_t j = 0; j < n; ++j) bsum[j / block] += score[j];
      std::vector<int32_t> order(bsum.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return bsum[a] > bsum[b]; });
      int32_t taken = 0, hit = 0;
      for (int32_t b : order) {
        for (int32_t j = b * block; j < std::min(n, (b + 1) * block) && taken < k; ++j, ++taken) {
          hit += critical.count(j);
        }
      }
      EXPECT_NEAR(block_recall(score.data(), n, k, block), static_cast<double>(hit) / k, 1e-12)
          << "seed " << seed << " block " << block;
    }
  }
  // Isolated critical tokens, one per 128: big blocks can not reach them all.
  std::vector<float> iso(1024, 0.001f);
  for (int32_t j = 5; j < 1024; j += 128) iso[j] = 1.0f;
  EXPECT_DOUBLE_EQ(block_recall(iso.data(), 1024, 8, 1), 1.0);
  EXPECT_LE(block_recall(iso.data(), 1024, 8, 128), 1.0 / 8 + 1e-12);
}

TEST(Analysis, QuestBoundIsAnUpperBoundAndExactForSingleKeys) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int32_t n = 101, d = 24, B = 16, nb = (n + B - 1) / B;
  std::vector<float> k(static_cast<size_t>(n) * d), q(d);
  for (float& x : k) x = nd(rng);
  for (float& x : q) x = nd(rng);
  std::vector<float> mn(static_cast<size_t>(nb) * d), mx(mn.size());
  block_min_max(k.data(), n, d, B, mn.data(), mx.data());
  for (int32_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int32_t c = 0; c < d; ++c) dot += double{q[c]} * k[j * d + c];
    const int32_t b = j / B;
    EXPECT_GE(quest_bound(q.data(), mn.data() + b * d, mx.data() + b * d, d), dot - 1e-4);
  }
  std::vector<float> mn1(static_cast<size_t>(n) * d), mx1(mn1.size());
  block_min_max(k.data(), n, d, 1, mn1.data(), mx1.data());
  for (int32_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int32_t c = 0; c < d; ++c) dot += double{q[c]} * k[j * d + c];
    EXPECT_NEAR(quest_bound(q.data(), mn1.data() + j * d, mx1.data() + j * d, d), dot, 1e-4);
  }
}

TEST(Analysis, RotationToOriginUndoesRopeAndRemovesPositionDrift) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int32_t H = 3, d = 64;
  for (RopeMode mode : {RopeMode::norm, RopeMode::neox}) {
    std::vector<float> q0(H * d);
    for (float& x : q0) x = nd(rng);
    // the same query at positions 4000 and 4001: raw cosine below 1, rotated back exactly 1
    std::vector<float> a = q0, b = q0;
    const int32_t pa = 4000, pb = 4001;
    rope(a.data(), &pa, 1, H, d, d, 10000.0f, mode);
    rope(b.data(), &pb, 1, H, d, d, 10000.0f, mode);
    EXPECT_LT(mean_head_cosine(a.data(), b.data(), H, d), 0.999);
    rotate_to_origin(a.data(), H, d, d, 10000.0f, mode, pa);
    rotate_to_origin(b.data(), H, d, d, 10000.0f, mode, pb);
    for (int32_t i = 0; i < H * d; ++i) EXPECT_NEAR(a[i], q0[i], 1e-4);
    EXPECT_NEAR(mean_head_cosine(a.data(), b.data(), H, d), 1.0, 1e-6);
  }
}

TEST(Analysis, SmallHelpers) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0);
  const std::vector<float> x = {1, -2, 3};
  EXPECT_DOUBLE_EQ(l1_norm(x.data(), 3), 6);
  const std::vector<float> q = {1, 2, 3, 5, 6, 7};
  std::vector<float> m(3);
  mean_over_heads(q.data(), 2, 3, m.data());
  EXPECT_EQ(m, (std::vector<float>{3, 4, 5}));
  const std::vector<float> a = {1, 0, 0, 1}, b = {0, 1, 0, 1};  // head 0 orthogonal, head 1 equal
  EXPECT_NEAR(mean_head_cosine(a.data(), b.data(), 2, 2), 0.5, 1e-9);
}

// The smallest subset of p (any entries, not only the largest) whose sum reaches mass * sum(p),
// by enumerating every subset (n <= 16).
int32_t brute_top_p(const std::vector<float>& p, double mass) {
  const int32_t n = static_cast<int32_t>(p.size());
  double total = 0;
  for (float x : p) total += x;
  int32_t best = n;
  for (uint32_t s = 0; s < (1u << n); ++s) {
    double sum = 0;
    int32_t size = 0;
    for (int32_t j = 0; j < n; ++j) {
      if (s >> j & 1) sum += p[j], ++size;
    }
    // The tolerance only absorbs summation order; the random cases are far from ties.
    if (sum >= mass * total * (1 - 1e-12)) best = std::min(best, size);
  }
  return best;
}

// Repeatedly takes the largest remaining entry (no sort) until the running sum reaches the
// target.
int32_t greedy_top_p(std::vector<float> p, double mass) {
  double total = 0;
  for (float x : p) total += x;
  double sum = 0;
  int32_t k = 0;
  while (sum < mass * total * (1 - 1e-12) && !p.empty()) {
    auto it = std::max_element(p.begin(), p.end());
    sum += *it;
    p.erase(it);
    ++k;
  }
  return k;
}

TEST(Analysis, TopPCountsHandMade) {
  const std::vector<double> masses = {0.5, 0.75, 0.76, 0.875, 0.9, 1.0};
  // Exact binary fractions, shuffled: 0.5, 0.25, 0.125, 0.125.
  const std::vector<float> p = {0.125f, 0.5f, 0.125f, 0.25f};
  EXPECT_EQ(top_p_counts(p, masses), (std::vector<int32_t>{1, 2, 3, 3, 4, 4}));
  // One key holds everything; zeros never count.
  const std::vector<float> one = {0, 0, 1, 0, 0};
  EXPECT_EQ(top_p_counts(one, masses), (std::vector<int32_t>{1, 1, 1, 1, 1, 1}));
  // Uniform over 8: ceil(8 m).
  const std::vector<float> uni(8, 0.125f);
  EXPECT_EQ(top_p_counts(uni, masses), (std::vector<int32_t>{4, 6, 7, 7, 8, 8}));
  // Renormalised: a row summing to 0.25 counts as the same row scaled to 1.
  const std::vector<float> part = {0.03125f, 0.125f, 0.0625f, 0.03125f};
  EXPECT_EQ(top_p_counts(part, masses), (std::vector<int32_t>{1, 2, 3, 3, 4, 4}));
  // Empty and all-zero rows need no keys.
  EXPECT_EQ(top_p_counts({}, masses), (std::vector<int32_t>(masses.size(), 0)));
  EXPECT_EQ(top_p_counts(std::vector<float>(3, 0.0f), masses),
            (std::vector<int32_t>(masses.size(), 0)));
  EXPECT_TRUE(top_p_counts(p, {}).empty());
}

TEST(Analysis, TopPCountsEqualBruteForceOnRandomRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<double> ud(0.05, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 1 + trial % 14;
    const float temp = 0.3f + static_cast<float>(trial % 5);  // flat to peaked softmax rows
    std::vector<float> p(n);
    double s = 0;
    for (float& x : p) s += x = std::exp(temp * nd(rng));
    for (float& x : p) x = static_cast<float>(x / s);
    const std::vector<double> masses = {ud(rng), ud(rng), 0.9, 0.95};
    const std::vector<int32_t> got = top_p_counts(p, masses);
    ASSERT_EQ(got.size(), masses.size());
    for (size_t i = 0; i < masses.size(); ++i)
      EXPECT_EQ(got[i], brute_top_p(p, masses[i])) << trial << " " << i;
  }
  // Longer softmax rows against the unsorted greedy reference.
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t n = 50 + 37 * trial;
    std::vector<float> p(n);
    double s = 0;
    for (float& x : p) s += x = std::exp(3.0f * nd(rng));
    for (float& x : p) x = static_cast<float>(x / s);
    const std::vector<double> masses = {0.5, 0.9, 0.95, 0.99, ud(rng)};
    const std::vector<int32_t> got = top_p_counts(p, masses);
    for (size_t i = 0; i < masses.size(); ++i)
      EXPECT_EQ(got[i], greedy_top_p(p, masses[i])) << trial << " " << i;
    for (size_t i = 1; i < 4; ++i) EXPECT_LE(got[i - 1], got[i]);  // monotone in the mass
  }
}

TEST(Analysis, TopPBudgetsSplitAllAndMiddleKeysPerHead) {
  const int32_t H = 3, n = 40, sinks = 4, window = 10;
  const std::vector<double> masses = {0.9, 0.95};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> prob(static_cast<size_t>(H) * n);
  for (int32_t h = 0; h < H; ++h) {
    double s = 0;
    for (int32_t j = 0; j < n; ++j) s += prob[h * n + j] = std::exp(2.0f * (h + 1) * nd(rng));
    for (int32_t j = 0; j < n; ++j) prob[h * n + j] = static_cast<float>(prob[h * n + j] / s);
  }
  std::vector<int32_t> all(H * 2), mid(H * 2);
  top_p_budgets(prob.data(), H, n, masses, sinks, window, all.data(), mid.data());
  for (int32_t h = 0; h < H; ++h) {
    const std::vector<float> row(prob.begin() + h * n, prob.begin() + (h + 1) * n);
    const std::vector<float> middle(row.begin() + sinks, row.end() - window);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(all[h * 2 + i], greedy_top_p(row, masses[i]));
      EXPECT_EQ(mid[h * 2 + i], greedy_top_p(middle, masses[i]));
    }
  }
  // No middle keys: -1.
  top_p_budgets(prob.data(), H, n, masses, 30, 10, all.data(), mid.data());
  EXPECT_EQ(mid, std::vector<int32_t>(H * 2, -1));
  EXPECT_EQ(all[0], greedy_top_p(std::vector<float>(prob.begin(), prob.begin() + n), 0.9));
}

}  // namespace
}  // namespace sieve

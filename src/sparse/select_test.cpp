// The pure pipeline stages against brute-force references, and the policy knob parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>

#include "sparse/policy.h"
#include "sparse/select.h"
#include "sparse/sketch.h"

namespace sieve {
namespace {

std::vector<float> random_logits(int heads, int n, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, spread);
  std::vector<float> v(static_cast<size_t>(heads) * n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(Aggregate, SoftVoteEqualsBruteForce) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const int H = 1 + seed % 4, n = 257 * seed;
    std::vector<float> logits = random_logits(H, n, seed, 3.0f * seed);
    // reference in double: sum_h exp(l - max_h) / sum_j exp(l - max_h)
    std::vector<double> ref(n, 0.0);
    for (int h = 0; h < H; ++h) {
      double m = -1e300, s = 0;
      for (int j = 0; j < n; ++j) m = std::max(m, double{logits[h * n + j]});
      for (int j = 0; j < n; ++j) s += std::exp(logits[h * n + j] - m);
      for (int j = 0; j < n; ++j) ref[j] += std::exp(logits[h * n + j] - m) / s;
    }
    std::vector<float> out(n);
    aggregate_scores(logits.data(), H, n, AggregationKind::soft_vote, 0, out.data());
    double total = 0;
    for (int j = 0; j < n; ++j) {
      EXPECT_NEAR(out[j], ref[j], 1e-6 + 1e-5 * ref[j]) << "seed " << seed << " j " << j;
      total += out[j];
    }
    EXPECT_NEAR(total, H, 1e-3);
  }
}

TEST(Aggregate, HardVoteCountsHeadsAndRawSumAdds) {
  // Two heads over 4 tokens; k = 1: head 0 votes token 2, head 1 votes token 2 -> 2 votes.
  std::vector<float> l = {0, 1, 5, 2, /*head 1*/ 3, 0, 4, 1};
  std::vector<float> out(4);
  std::vector<float> tmp = l;
  aggregate_scores(tmp.data(), 2, 4, AggregationKind::hard_vote, 1, out.data());
  EXPECT_GE(out[2], 2.0f);
  EXPECT_LT(out[0], 1.0f);  // no vote: tie-break mass only
  EXPECT_LT(out[3], 1.0f);
  tmp = l;
  aggregate_scores(tmp.data(), 2, 4, AggregationKind::raw_sum, 0, out.data());
  EXPECT_FLOAT_EQ(out[0], 3);
  EXPECT_FLOAT_EQ(out[2], 9);
}

TEST(Pick, TopKEqualsSortReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 500), k = static_cast<int>(rng() % (n + 3));
    std::vector<float> s(n);
    for (float& x : s) x = static_cast<float>(rng() % 50);  // many ties
    std::vector<int32_t> ref(n);
    std::iota(ref.begin(), ref.end(), 0);
    std::stable_sort(ref.begin(), ref.end(), [&](int a, int b) { return s[a] > s[b]; });
    ref.resize(std::min(k, n));
    std::sort(ref.begin(), ref.end());
    EXPECT_EQ(pick_tokens(s.data(), n, k, 0.0f, 0, 1), ref) << "trial " << trial;
  }
}

// Long rows whose k-th value sits among keys that share their top 11 and 22 bits (the second
// and third radix levels decide), with exact ties, negatives and both zeros (-0 ties +0).
TEST(Pick, TopKOfCrowdedScoresEqualsSortReference) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    const int n = 2000 + static_cast<int>(rng() % 30000);
    const int k = 1 + static_cast<int>(rng() % (n - 1));
    std::vector<float> s(n);
    const float base = 1e-4f * static_cast<float>(1 + trial % 5);
    for (float& x : s) {
      const uint32_t r = rng() % 16;
      if (r == 0)
        x = 0.0f;
      else if (r == 1)
        x = -0.0f;
      else if (r == 2)
        x = -base;
      else if (r < 6)
        x = base;  // exact ties
      else
        x = std::nextafter(base, 1.0f) +
            base * 1e-4f * static_cast<float>(rng() % 4096);  // low bits differ
    }
    std::vector<int32_t> ref(n);
    std::iota(ref.begin(), ref.end(), 0);
    std::stable_sort(ref.begin(), ref.end(), [&](int a, int b) { return s[a] > s[b]; });
    ref.resize(k);
    std::sort(ref.begin(), ref.end());
    EXPECT_EQ(pick_tokens(s.data(), n, k, 0.0f, 0, 1), ref)
        << "trial " << trial << " n " << n << " k " << k;
  }
}

TEST(Pick, TopPIsTheSmallestSetReachingTheMass) {
  std::vector<float> s = {0.05f, 0.5f, 0.1f, 0.3f, 0.05f};
  EXPECT_EQ(pick_tokens(s.data(), 5, 0, 0.5f, 0, 1), (std::vector<int32_t>{1}));
  EXPECT_EQ(pick_tokens(s.data(), 5, 0, 0.8f, 0, 1), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(pick_tokens(s.data(), 5, 0, 0.85f, 0, 1), (std::vector<int32_t>{1, 2, 3}));
  // floor and cap
  EXPECT_EQ(pick_tokens(s.data(), 5, 0, 0.5f, 3, 1).size(), 3u);
  EXPECT_EQ(pick_tokens(s.data(), 5, 2, 0.99f, 0, 1), (std::vector<int32_t>{1, 3}));
}

TEST(Pick, BlocksAreTakenWhole) {
  // Blocks of 4: sums 1, 10, 2 (partial block of 2 tokens at the end).
  std::vector<float> s = {0.25f, 0.25f, 0.25f, 0.25f, 1, 2, 3, 4, 1, 1};
  EXPECT_EQ(pick_tokens(s.data(), 10, 4, 0.0f, 0, 4), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(pick_tokens(s.data(), 10, 6, 0.0f, 0, 4), (std::vector<int32_t>{4, 5, 6, 7, 8, 9}));
}

TEST(Pick, MaxPoolSmoothsNeighbours) {
  std::vector<float> in = {0, 0, 9, 0, 0, 0}, out(6);
  max_pool_scores(in.data(), 6, 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{0, 9, 9, 9, 0, 0}));
}

TEST(KeySet, SinksPickedWindowAndChunkInOrder) {
  std::vector<int32_t> out;
  const std::vector<int32_t> picked = {0, 5, 30,
                                       94};  // relative to pick_begin 2; 94 -> 96 in window
  build_key_set(100, 3, 2, 8, 2, picked, out);
  std::vector<int32_t> want = {0, 1, 2, 7, 32};
  for (int j = 92; j < 103; ++j) want.push_back(j);
  EXPECT_EQ(out, want);
  // Picks among the sinks or in the window are read once, as sinks or window keys.
  build_key_set(100, 0, 4, 8, 0, std::vector<int32_t>{1, 3, 10, 50, 92, 95}, out);
  want = {0, 1, 2, 3, 10, 50};
  for (int j = 92; j < 100; ++j) want.push_back(j);
  EXPECT_EQ(out, want);
}

TEST(Eviction, H2OKeepsTheHeaviestAndSTCAReachesTheMass) {
  const int n = 100;
  std::vector<float> imp(n, 0.0f);
  for (int j = 0; j < n; ++j) imp[j] = static_cast<float>((j * 37) % 100);
  const auto drop = plan_eviction(imp.data(), n, MemoryKind::evict_h2o, 40, 4, 10, 0, 0);
  EXPECT_EQ(drop.size(), 60u);
  EXPECT_TRUE(std::is_sorted(drop.begin(), drop.end()));
  for (int32_t j : drop) {
    EXPECT_GE(j, 4);
    EXPECT_LT(j, n - 10);
  }
  // every kept middle token outweighs every dropped one
  std::vector<char> dropped(n, 0);
  for (int32_t j : drop) dropped[j] = 1;
  float min_kept = 1e9f, max_dropped = -1;
  for (int j = 4; j < n - 10; ++j) {
    if (dropped[j])
      max_dropped = std::max(max_dropped, imp[j]);
    else
      min_kept = std::min(min_kept, imp[j]);
  }
  EXPECT_GT(min_kept, max_dropped);
  // stca: one heavy token holds 90% of the mass -> kept alone plus the floor
  std::vector<float> peaked(n, 0.01f);
  peaked[50] = 100.0f;
  auto d2 = plan_eviction(peaked.data(), n, MemoryKind::evict_stca, 90, 4, 10, 0.9f, 3);
  EXPECT_EQ(n - static_cast<int>(d2.size()), 4 + 10 + 3);
  EXPECT_FALSE(std::binary_search(d2.begin(), d2.end(), 50));
  EXPECT_TRUE(plan_eviction(peaked.data(), n, MemoryKind::evict_stca, 100, 4, 10, 0.9f, 3).empty());
}

TEST(Sketch, ProjectionPreservesInnerProductsRoughlyAndIsSeeded) {
  SketchSpec spec;
  spec.head_dim = 64;
  spec.dim = 32;
  spec.n_kv_head = 2;
  spec.shared = true;
  spec.seed = 42;
  SketchProjection a(spec), b(spec);
  std::vector<float> x(64), y(64), px(32), py(32), qx(32);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  double err = 0, norm = 0;
  for (int t = 0; t < 200; ++t) {
    for (auto& v : x) v = nd(rng);
    for (auto& v : y) v = nd(rng);
    a.project(x.data(), 0, 0, px.data());
    a.project(y.data(), 0, 1, py.data());
    b.project(x.data(), 0, 0, qx.data());
    EXPECT_EQ(px, qx);
    double exact = 0, est = 0;
    for (int i = 0; i < 64; ++i) exact += x[i] * y[i];
    for (int i = 0; i < 32; ++i) est += px[i] * py[i];
    double xx = 0, yy = 0;
    for (int i = 0; i < 64; ++i) xx += x[i] * x[i], yy += y[i] * y[i];
    err += (est - exact) * (est - exact);
    norm += xx * yy;
  }
  EXPECT_LT(err / norm, 2.0 / 32);  // JL: variance about |x|^2 |y|^2 / d_s
}

TEST(Policy, PresetsKnobsAndErrors) {
  for (std::string_view p : policy_presets()) EXPECT_TRUE(make_policy(p).ok()) << p;
  auto bad = make_policy("nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("tokenselect"), std::string::npos);
  PolicyConfig p = *make_policy("tokenselect");
  EXPECT_EQ(p.top_k, 2048);
  EXPECT_EQ(p.sinks, 128);
  EXPECT_EQ(p.local, 512);
  EXPECT_FLOAT_EQ(p.theta, 0.9f);
  EXPECT_TRUE(set_policy_knob(p, "top_k=1024").ok());
  EXPECT_EQ(p.top_k, 1024);
  Status st = set_policy_knob(p, "topk=5");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("top_k"), std::string::npos);  // lists the valid knobs
  EXPECT_FALSE(set_policy_knob(p, "top_k=-3").ok());
  EXPECT_FALSE(set_policy_knob(p, "top_k=12abc").ok());
  EXPECT_FALSE(set_policy_knob(p, "theta=nan").ok());
  EXPECT_FALSE(set_policy_knob(p, "scorer=magic").ok());
  EXPECT_FALSE(set_policy_knob(p, "selection_cache=maybe").ok());
  EXPECT_FALSE(set_policy_knob(p, "no_equals_sign").ok());
  EXPECT_EQ(p.describe(), "tokenselect top_k=1024");
  PolicyConfig rt = *make_policy("rtpurbo");
  EXPECT_FLOAT_EQ(rt.rt_gain, 1.0f);
  EXPECT_TRUE(set_policy_knob(rt, "rt_gain=4").ok());
  EXPECT_FLOAT_EQ(rt.rt_gain, 4.0f);
  EXPECT_FALSE(set_policy_knob(rt, "rt_gain=0").ok());
  EXPECT_FALSE(set_policy_knob(rt, "rt_gain=-2").ok());
  EXPECT_FLOAT_EQ(rt.rt_refine, 0.0f);
  EXPECT_TRUE(set_policy_knob(rt, "rt_refine=0.9").ok());
  EXPECT_FLOAT_EQ(rt.rt_refine, 0.9f);
  EXPECT_FALSE(set_policy_knob(rt, "rt_refine=1.5").ok());
  EXPECT_FALSE(set_policy_knob(rt, "rt_refine=-0.1").ok());
  auto j =
      policy_from_json_text(R"({"policy":"stca","keep_mass":0.8,"selection_cache":false})", "auto");
  ASSERT_TRUE(j.ok()) << j.message();
  EXPECT_EQ(j->preset, "stca");
  EXPECT_FLOAT_EQ(j->keep_mass, 0.8f);
  EXPECT_FALSE(policy_from_json_text(R"({"policy":"stca","kv_budget":[1]})", "auto").ok());
  EXPECT_FALSE(
      policy_from_json_text(R"({"policy":"stca","kv_budget":10})", "auto").ok());  // < sinks+local
  EXPECT_FALSE(policy_from_json_text("{nope", "auto").ok());
}

TEST(Policy, FilesInBothForms) {
  const std::string a = testing::TempDir() + "/p.json", b = testing::TempDir() + "/p.txt";
  std::ofstream(a) << R"({"policy": "sketch", "sketch_dim": 16, "top_p": 0.95})";
  std::ofstream(b) << "# comment\npolicy = quest\nblock = 32  # pages\ntop_k=1024\n";
  auto pa = load_policy_file(a);
  ASSERT_TRUE(pa.ok()) << pa.message();
  EXPECT_EQ(pa->sketch_dim, 16);
  EXPECT_FLOAT_EQ(pa->top_p, 0.95f);
  auto pb = load_policy_file(b);
  ASSERT_TRUE(pb.ok()) << pb.message();
  EXPECT_EQ(pb->preset, "quest");
  EXPECT_EQ(pb->block, 32);
  std::ofstream(b) << "top_k = 5\npolicy = dense\n";
  EXPECT_FALSE(load_policy_file(b).ok());
  EXPECT_FALSE(load_policy_file(testing::TempDir() + "/missing.json").ok());
}

TEST(Policy, AutoResolvesByPromptLength) {
  PolicyConfig a = *make_policy("auto");
  EXPECT_TRUE(resolve_auto(a, 100).is_dense());
  EXPECT_EQ(resolve_auto(a, 100000).preset, auto_sparse_preset());
  // auto prefills in selecting chunks but runs the prompt's last 1024 tokens densely (every
  // chunk selecting cost quality: RESULTS.md); the tokenselect preset keeps the paper's rule
  const PolicyConfig r = resolve_auto(a, 100000);
  EXPECT_EQ(r.prefill, PrefillMode::chunk);
  EXPECT_EQ(r.prefill_tail, 1024);
  EXPECT_TRUE(r.from_auto);
  EXPECT_FLOAT_EQ(r.theta, 0.7f);  // reuses selections more often than the paper's 0.9
  EXPECT_EQ(r.describe(), "tokenselect prefill_tail=1024 theta=0.7");
  // Past the trained window it scores pre-RoPE and keeps theta (RESULTS.md, "Pre-RoPE selection
  // scores").
  EXPECT_EQ(r.score_positions, ScorePositions::auto_);
  EXPECT_FLOAT_EQ(r.compact_theta, 0.0f);
  EXPECT_FLOAT_EQ(make_policy("tokenselect")->theta, 0.9f);
  EXPECT_EQ(make_policy("tokenselect")->prefill, PrefillMode::chunk);
  EXPECT_EQ(make_policy("tokenselect")->prefill_tail, 0);
  EXPECT_FALSE(make_policy("tokenselect")->from_auto);
}

}  // namespace
}  // namespace sieve

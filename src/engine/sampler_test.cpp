#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace sieve {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) {
  return std::vector<float>(v);
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplerParams p;
  p.temperature = 0;
  Sampler s(p);
  auto l = logits_of({0.1f, 3.0f, 3.0f, -1.0f});
  EXPECT_EQ(s.sample(l, {}), 1);
}

// argmax against the plain scan it replaced (first strictly greater value wins) on rows with
// ties, NaNs, signed zeros and every length around the 8-lane blocks.
TEST(Sampler, ArgmaxMatchesAFirstGreaterScan) {
  auto scan = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      if (v[i] > v[best]) best = static_cast<int32_t>(i);
    }
    return best;
  };
  std::mt19937 rng(3);
  for (int t = 0; t < 3000; ++t) {
    std::vector<float> v(1 + rng() % 70);
    for (float& x : v) {
      const uint32_t r = rng() % 9;
      x = r == 0   ? std::nanf("")
          : r == 1 ? -0.0f
                   : static_cast<float>(static_cast<int>(rng() % 5) - 2);
    }
    ASSERT_EQ(argmax(v), scan(v)) << "row " << t;
  }
  std::vector<float> big(49152, -1.0f);
  big[40000] = 2.0f;
  big[45000] = 2.0f;
  EXPECT_EQ(argmax(big), 40000);
}

TEST(Sampler, SameSeedSameOutputDifferentSeedDiffers) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = 0.05f * static_cast<float>(i % 7);
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.sample(l, {}));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, TopKRestrictsToKBest) {
  SamplerParams p;
  p.temperature = 5.0f;
  p.top_k = 2;
  p.top_p = 1.0f;
  p.min_p = 0;
  Sampler s(p);
  auto l = logits_of({1.0f, 5.0f, 4.0f, 0.0f, 3.9f});
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.sample(l, {});
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

TEST(Sampler, TopPKeepsSmallestSetReachingMass) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.5f;
  p.min_p = 0;
  Sampler s(p);
  // probabilities ~ 0.64, 0.24, 0.09, ...: top-p 0.5 keeps only the first
  auto l = logits_of({3.0f, 2.0f, 1.0f, 0.0f});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l, {}), 0);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.5f;
  Sampler s(p);
  auto l = logits_of({2.0f, 1.9f, -3.0f, -4.0f});
  std::map<int32_t, int> seen;
  for (int i = 0; i < 300; ++i) seen[s.sample(l, {})]++;
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

TEST(Sampler, PenaltiesDemoteSeenTokens) {
  SamplerParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  auto l = logits_of({2.0f, 1.5f, 0.0f});
  std::vector<int32_t> hist = {0};
  EXPECT_EQ(s.sample(l, hist), 1);  // 2.0 / 2 = 1.0 < 1.5
  SamplerParams q;
  q.temperature = 0;
  q.frequency_penalty = 0.4f;
  Sampler f(q);
  std::vector<int32_t> twice = {0, 0};
  EXPECT_EQ(f.sample(l, twice), 1);  // 2.0 - 0.8 = 1.2 < 1.5
  SamplerParams r;
  r.temperature = 0;
  r.presence_penalty = 0.4f;
  Sampler pr(r);
  EXPECT_EQ(pr.sample(l, twice), 0);  // 2.0 - 0.4 = 1.6 > 1.5
}

TEST(Sampler, RejectsOutOfRangeParameters) {
  SamplerParams p;
  p.top_p = 1.5f;
  EXPECT_FALSE(validate(p).ok());
  p = {};
  p.temperature = -1;
  EXPECT_FALSE(validate(p).ok());
  p = {};
  p.top_k = -3;
  EXPECT_FALSE(validate(p).ok());
  EXPECT_TRUE(validate(SamplerParams{}).ok());
}

}  // namespace
}  // namespace sieve

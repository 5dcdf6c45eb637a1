// UniPrefill's model-free half: the layer schedule and the block selection rule.
#include "sparse/uniprefill.h"

#include <gtest/gtest.h>

#include <numeric>

namespace sieve {
namespace {

PolicyConfig knobs(float p, int block, int sinks, int tail) {
  PolicyConfig P = *make_policy("uniprefill");
  P.up_p = p;
  P.up_block = block;
  P.up_sinks = sinks;
  P.up_tail = tail;
  return P;
}

std::vector<int32_t> iota_pos(size_t n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(UniPrefillLayers, AutoSchedules) {
  const PolicyConfig P = *make_policy("uniprefill");
  // A plain 30-layer model (SmolLM2): from the middle, every 4 layers (chosen by measurement).
  std::vector<uint8_t> full30(30, 1);
  EXPECT_EQ(*uniprefill_layers(P, full30), (std::vector<int32_t>{14, 18, 22, 26}));
  std::vector<uint8_t> full32(32, 1);
  EXPECT_EQ(*uniprefill_layers(P, full32), (std::vector<int32_t>{15, 19, 23, 27}));
  std::vector<uint8_t> full4(4, 1);
  EXPECT_EQ(*uniprefill_layers(P, full4), (std::vector<int32_t>{2}));
  // A 5:1 hybrid (Gemma 3 270M): every full-attention layer.
  std::vector<uint8_t> hybrid(18, 0);
  hybrid[5] = hybrid[11] = hybrid[17] = 1;
  EXPECT_EQ(*uniprefill_layers(P, hybrid), (std::vector<int32_t>{5, 11, 17}));
}

TEST(UniPrefillLayers, ExplicitListIsChecked) {
  PolicyConfig P = *make_policy("uniprefill");
  std::vector<uint8_t> hybrid(18, 0);
  hybrid[5] = hybrid[11] = 1;
  P.up_layers = {5, 11};
  EXPECT_EQ(*uniprefill_layers(P, hybrid), (std::vector<int32_t>{5, 11}));
  P.up_layers = {4};
  auto r = uniprefill_layers(P, hybrid);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("sliding-window"), std::string::npos) << r.message();
  P.up_layers = {18};
  r = uniprefill_layers(P, hybrid);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("0..17"), std::string::npos) << r.message();
}

TEST(UniPrefillLayers, KnobParsing) {
  PolicyConfig P = *make_policy("uniprefill");
  ASSERT_TRUE(set_policy_knob(P, "up_layers=3, 7,11").ok());
  EXPECT_EQ(P.up_layers, (std::vector<int32_t>{3, 7, 11}));
  EXPECT_NE(P.describe().find("up_layers=3,7,11"), std::string::npos) << P.describe();
  EXPECT_FALSE(set_policy_knob(P, "up_layers=7,3").ok());
  EXPECT_FALSE(set_policy_knob(P, "up_layers=seven").ok());
  EXPECT_FALSE(set_policy_knob(P, "up_layers=").ok());
  EXPECT_EQ(P.up_layers, (std::vector<int32_t>{3, 7, 11}));  // a failed set changes nothing
  ASSERT_TRUE(set_policy_knob(P, "up_layers=auto").ok());
  EXPECT_TRUE(P.up_layers.empty());
  auto j = policy_from_json_text(
      R"({"policy":"tokenselect","prefill":"uniprefill","up_layers":[2,9],"up_p":0.95})", "dense");
  ASSERT_TRUE(j.ok()) << j.message();
  EXPECT_EQ(j->up_layers, (std::vector<int32_t>{2, 9}));
  EXPECT_TRUE(j->drops_prefill());
  EXPECT_FALSE(j->dense_attention());  // tokenselect decode on top of uniprefill prefill
  EXPECT_FALSE(set_policy_knob(P, "up_tail=0").ok());
  EXPECT_TRUE(make_policy("uniprefill")->drops_prefill());
  EXPECT_FALSE(make_policy("uniprefill")->is_dense());
  EXPECT_TRUE(make_policy("uniprefill")->dense_attention());
}

TEST(UniPrefillKeep, PEqualOneKeepsEverything) {
  std::vector<float> imp(300, 0.0f);
  imp[7] = 5;
  std::vector<char> keep;
  uniprefill_keep(knobs(1.0f, 64, 0, 1), imp, iota_pos(300), keep);
  EXPECT_EQ(std::count(keep.begin(), keep.end(), 1), 300);
}

TEST(UniPrefillKeep, CrossingBlockIsKeptAndTheRestDropped) {
  // Four blocks of 10 with mean masses 5, 3, 2, 0 (total 10).
  std::vector<float> imp(40, 0.0f);
  for (int i = 0; i < 10; ++i) imp[10 + i] = 5, imp[20 + i] = 3, imp[30 + i] = 2;
  std::vector<char> keep;
  // p = 0.6: block 1 (before 0) kept, block 2 (before 0.5 <= 0.6) kept - it crosses p -, block 3
  // (before 0.8) not.
  uniprefill_keep(knobs(0.6f, 10, 0, 1), imp, iota_pos(40), keep);
  for (int i = 0; i < 40; ++i) {
    const bool want = (i >= 10 && i < 30) || i == 39;  // the tail row always
    EXPECT_EQ(keep[i], want) << i;
  }
  // p = 0: only the best block (plus tail).
  uniprefill_keep(knobs(0.0f, 10, 0, 1), imp, iota_pos(40), keep);
  EXPECT_EQ(std::count(keep.begin(), keep.end(), 1), 11);
  EXPECT_TRUE(keep[10] && keep[19] && !keep[20]);
}

TEST(UniPrefillKeep, SinksByPositionTailByRowAndPartialLastBlock) {
  // Rows carry positions 100.. after an earlier drop: sinks are positions, not rows.
  std::vector<float> imp(25, 0.0f);
  imp[12] = 10;  // block 1 of [0,10), [10,20), [20,25)
  auto pos = iota_pos(25, 100);
  pos[0] = 3;  // one sink survived an earlier selection
  std::vector<char> keep;
  uniprefill_keep(knobs(0.5f, 10, 8, 2), imp, pos, keep);
  for (int i = 0; i < 25; ++i) {
    const bool want = i == 0 || (i >= 10 && i < 20) || i >= 23;
    EXPECT_EQ(keep[i], want) << i;
  }
  // The short last block is scored by its mean: 5 rows of mass 1 beat 10 rows of total 6.
  std::vector<float> imp2(25, 0.0f);
  for (int i = 0; i < 10; ++i) imp2[i] = 0.6f;
  for (int i = 20; i < 25; ++i) imp2[i] = 1.0f;
  uniprefill_keep(knobs(0.0f, 10, 0, 1), imp2, iota_pos(25), keep);
  EXPECT_EQ(std::count(keep.begin(), keep.end(), 1), 5);
  EXPECT_TRUE(keep[20]);
}

}  // namespace
}  // namespace sieve

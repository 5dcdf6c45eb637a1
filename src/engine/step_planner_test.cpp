// The step planner's arithmetic (chunks sized to the predicted time, decodes first, the
// minimum chunk, the order of prompts) and the cost model's fit, without a model.
#include "engine/step_planner.h"

#include <gtest/gtest.h>

#include <random>

namespace sieve {
namespace {

// A cost model that has seen nothing: its prior is exactly these per-unit costs.
StepCostModel model_of(double step, double prefill, double decode, double key) {
  return StepCostModel({step, 0, prefill, decode, key});
}

StepShape decodes_at(std::initializer_list<int64_t> depths) {
  StepShape s;
  for (int64_t d : depths) s.add_decode(d);
  return s;
}

TEST(StepShape, CausalKeyCount) {
  EXPECT_EQ(chunk_kv_reads(1, 0), 1);
  EXPECT_EQ(chunk_kv_reads(4, 0), 10);     // 1 + 2 + 3 + 4
  EXPECT_EQ(chunk_kv_reads(4, 100), 410);  // each row also reads the 100 before it
  StepShape s;
  s.add_decode(99);
  s.add_prefill(4, 100);
  EXPECT_EQ(s.decode_tokens, 1);
  EXPECT_EQ(s.prefill_tokens, 4);
  EXPECT_EQ(s.kv_reads, 100 + 410);
}

TEST(StepPlanner, ChunkFillsTheTimeLeftAfterTheDecodes) {
  // 10 ms a step, 1 ms a token, keys free: 4 decodes cost 14 ms; a 50 ms budget leaves 36 ms.
  const StepCostModel cost = model_of(10, 1, 1, 0);
  PlannerConfig cfg{50, 512, 512, 16};
  const StepShape dec = decodes_at({0, 0, 0, 0});
  EXPECT_DOUBLE_EQ(cost.predict_ms(dec), 14);
  const std::vector<PrefillSlot> one = {{1000, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({36}));
  // A short prompt takes what it needs; the next one gets the rest, in order.
  const std::vector<PrefillSlot> two = {{10, 0, 0}, {1000, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, two), std::vector<int32_t>({10, 26}));
  // The token budget still caps the step (decodes count in it), as does the chunk limit.
  cfg.max_batch_tokens = 20;
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({16}));
  cfg.max_batch_tokens = 512;
  cfg.max_chunk = 30;
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({30}));
}

TEST(StepPlanner, DeeperPromptsGetSmallerChunksForTheSameTime) {
  // Keys cost: a chunk at depth 4000 reads ~4000 keys per token more than one at depth 0.
  const StepCostModel cost = model_of(5, 0.5, 0.5, 1e-4);
  const PlannerConfig cfg{60, 4096, 4096, 16};
  const StepShape dec = decodes_at({4000});
  const std::vector<PrefillSlot> shallow = {{4000, 0, 0}}, deep = {{4000, 4000, 0}};
  const int32_t a = plan_prefill_chunks(cost, cfg, dec, shallow)[0];
  const int32_t b = plan_prefill_chunks(cost, cfg, dec, deep)[0];
  EXPECT_GT(a, b);
  for (auto [slots, n] : {std::pair{shallow, a}, std::pair{deep, b}}) {
    StepShape s = dec;
    s.add_prefill(n, slots[0].depth);
    EXPECT_LE(cost.predict_ms(s), cfg.max_step_ms);  // the largest chunk that fits ...
    StepShape more = dec;
    more.add_prefill(n + 1, slots[0].depth);
    EXPECT_GT(cost.predict_ms(more), cfg.max_step_ms);  // ... and one more token would not
  }
}

TEST(StepPlanner, FirstPromptNeverStarvesAndEachGetsAMinimumWhileItFits) {
  const StepCostModel cost = model_of(10, 1, 1, 0);
  PlannerConfig cfg{20, 512, 512, 16};
  // Decodes alone (8 x 1 ms + 10 ms) are near the 20 ms budget: the first prompt still gets
  // its minimum chunk; the second does not (it would push the step further over).
  const StepShape dec = decodes_at({0, 0, 0, 0, 0, 0, 0, 0});
  const std::vector<PrefillSlot> two = {{1000, 0, 0}, {1000, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, two), std::vector<int32_t>({16, 0}));
  // With room for both minimums, a short prompt behind a long one gets its chunk in the same
  // step (it is not kept waiting for the long prompt's whole prefill), and the rest goes to
  // the first prompt.
  cfg.max_step_ms = 100;
  const std::vector<PrefillSlot> long_short = {{4000, 0, 0}, {12, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, long_short), std::vector<int32_t>({70, 12}));
  // Prompts of equal length are first come, first served: the first takes the whole budget
  // rather than sharing it (which would delay all of them).
  cfg.max_step_ms = 18 + 32 + 5;
  const std::vector<PrefillSlot> three = {{100, 0, 0}, {100, 0, 0}, {100, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, three), std::vector<int32_t>({37, 0, 0}));
  // Shorter ones behind the first get a minimum each and fill the budget before it.
  const std::vector<PrefillSlot> mixed = {{100, 0, 0}, {30, 0, 0}, {100, 0, 0}, {20, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, mixed), std::vector<int32_t>({16, 21, 0, 0}));
}

TEST(StepPlanner, WithoutABudgetTheTokenBudgetFillsInOrder) {
  const StepCostModel cost = model_of(10, 1, 1, 0);
  const PlannerConfig cfg{0, 512, 512, 16};
  const StepShape dec = decodes_at({5, 6});
  const std::vector<PrefillSlot> slots = {{300, 0, 0}, {400, 0, 0}, {50, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, slots), std::vector<int32_t>({300, 210, 0}));
}

TEST(StepPlanner, FixedChunksGoInWhole) {
  // UniPrefill's one chunk: placed whatever the budgets, the others fill what is left.
  const StepCostModel cost = model_of(10, 1, 1, 0);
  const PlannerConfig cfg{100, 512, 512, 16};
  const StepShape dec = decodes_at({0});
  const std::vector<PrefillSlot> slots = {{50, 0, 0}, {3000, 0, 300}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, slots), std::vector<int32_t>({16, 300}));
}

TEST(StepPlanner, AutoBudgetIsTheShortestStepWithinTheThroughputBound) {
  // 10 ms a step, 1 ms a token: with one decode, a full chunk of 511 tokens gives 511/522 tokens
  // per ms; 90% of that is first reached at 82 tokens (82/93), so the budget is 93 ms.
  const StepCostModel cost = model_of(10, 1, 1, 0);
  const PlannerConfig cfg{0, 512, 512, 16};
  const std::vector<PrefillSlot> slot = {{4000, 0, 0}};
  EXPECT_DOUBLE_EQ(auto_step_budget(cost, cfg, decodes_at({0}), slot), 93);
  // A stricter bound takes longer steps; nobody decoding or nothing to prefill: no budget.
  EXPECT_GT(auto_step_budget(cost, cfg, decodes_at({0}), slot, 0.97), 93);
  EXPECT_EQ(auto_step_budget(cost, cfg, StepShape{}, slot), 0);
  EXPECT_EQ(auto_step_budget(cost, cfg, decodes_at({0}), {}), 0);
  // The chunks the planner then makes fill that budget.
  PlannerConfig with = cfg;
  with.max_step_ms = auto_step_budget(cost, cfg, decodes_at({0}), slot);
  EXPECT_EQ(plan_prefill_chunks(cost, with, decodes_at({0}), slot), std::vector<int32_t>({82}));
}

TEST(StepPlanner, ChunksGrowToFillTheirGroupOfRows) {
  // 10 ms a step, 1 ms a token: 3 decodes and a 47 ms budget leave room for 34 tokens, 37 rows;
  // the GEMM computes 40 rows either way, so the chunk takes 37 tokens.
  const StepCostModel cost = model_of(10, 1, 1, 0);
  PlannerConfig cfg{47, 512, 512, 16};
  cfg.row_group = 8;
  const StepShape dec = decodes_at({0, 0, 0});
  const std::vector<PrefillSlot> one = {{1000, 0, 0}};
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({37}));
  // Not past the prompt, the chunk limit or the token budget.
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, std::vector<PrefillSlot>{{35, 0, 0}}),
            std::vector<int32_t>({34}));
  cfg.max_chunk = 36;
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({34}));
  cfg.max_chunk = 512;
  cfg.max_batch_tokens = 38;
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({34}));
  // The minimum chunk fills its group too; without a time budget nothing changes.
  cfg = PlannerConfig{5, 512, 512, 16};
  cfg.row_group = 8;
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({21}));
  cfg.max_step_ms = 0;
  cfg.max_batch_tokens = 40;
  EXPECT_EQ(plan_prefill_chunks(cost, cfg, dec, one), std::vector<int32_t>({37}));
  // The auto budget is looked for among filled chunks: with one decode, 90% of a full chunk's
  // throughput (511/522 tokens per ms) is first reached at 87 tokens (88 rows; 87/98), where
  // without the groups it was 82 (83 rows; 82/93).
  PlannerConfig a{0, 512, 512, 16};
  a.row_group = 8;
  EXPECT_DOUBLE_EQ(auto_step_budget(cost, a, decodes_at({0}), one), 98);
  a.max_step_ms = 98;
  EXPECT_EQ(plan_prefill_chunks(cost, a, decodes_at({0}), one), std::vector<int32_t>({87}));
}

TEST(StepCostModel, LearnsTheCostsOfMeasuredSteps) {
  // Steps of a machine with 8 ms per step (+30 with more than one row: the GEMM's fixed cost,
  // which batched decodes pay as well), 1.5 ms per prefill token, 3 ms per decode token and 20
  // ns per key, with 5% noise; the prior is off by 2-20x.
  StepCostModel m;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> n_dec(0, 8), n_pf(0, 300), depth(0, 4000);
  std::normal_distribution<double> noise(1.0, 0.05);
  auto truth = [](const StepShape& s) {
    return 8 + (s.prefill_tokens + s.decode_tokens > 1 ? 30 : 0) + 1.5 * s.prefill_tokens +
           3 * s.decode_tokens + 2e-5 * s.kv_reads;
  };
  for (int i = 0; i < 300; ++i) {
    StepShape s;
    for (int k = n_dec(rng); k > 0; --k) s.add_decode(depth(rng));
    if (const int n = n_pf(rng); n > 0 && i % 2 == 0)
      s.add_prefill(n, depth(rng));  // and decode-only steps
    m.observe(s, truth(s) * noise(rng));
  }
  auto mixed = [](std::initializer_list<int64_t> decodes, int64_t n, int64_t depth) {
    StepShape s = decodes_at(decodes);
    s.add_prefill(n, depth);
    return s;
  };
  // A chunk added to batched decodes costs its tokens only: the GEMM's fixed cost is paid by
  // the decodes already, and the model does not charge it twice.
  for (const StepShape& s : {decodes_at({100}), decodes_at({3000, 3000, 3000, 3000}),
                             mixed({2000}, 200, 1000), mixed({500, 500, 500, 500}, 16, 1000)}) {
    EXPECT_NEAR(m.predict_ms(s) / truth(s), 1.0, 0.1) << s.decode_tokens << " " << s.prefill_tokens;
  }
  for (double c : m.per_unit()) EXPECT_GE(c, 0);
}

TEST(StepCostModel, FollowsAMachineThatSlowsDownAndKeepsCostsNonNegative) {
  StepCostModel m({10, 0, 1, 1, 0});
  StepShape dec = decodes_at({10, 10});
  for (int i = 0; i < 50; ++i) m.observe(dec, 20);
  EXPECT_NEAR(m.predict_ms(dec), 20, 1);
  for (int i = 0; i < 100; ++i) m.observe(dec, 40);  // another process took a core
  EXPECT_NEAR(m.predict_ms(dec), 40, 2);
  // Steps that suggest a negative per-token cost (bigger steps measured faster) never yield
  // a negative coefficient; a chunk stays within the token limits whatever the fit says.
  for (int i = 0; i < 50; ++i) {
    StepShape s;
    s.add_prefill(1 + i * 5, 0);
    m.observe(s, 100.0 - i);
  }
  for (double c : m.per_unit()) EXPECT_GE(c, 0);
  const PlannerConfig cfg{150, 512, 512, 16};
  const std::vector<PrefillSlot> slot = {{100000, 0, 0}};
  EXPECT_LE(plan_prefill_chunks(m, cfg, decodes_at({0}), slot)[0], 511);
}

}  // namespace
}  // namespace sieve

// Prompt log-probabilities (OpenAI's echo): every prompt token after the first is scored from
// the rows of its prefill, through the prefix cache and chunking, and equal a whole-prompt
// forward; max_tokens 0 scores without generating; the running gauge drops to 0 after.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine_test_util.h"
#include "engine/kv_binding.h"
#include "engine/scheduler.h"

namespace sieve {
namespace {

KvStore make_store(const Model& m, int64_t budget) {
  KvConfig c = kv_config_for(m.hp, budget, 16, "test");
  c.prefix_cache = true;
  auto s = KvStore::create(c);
  EXPECT_TRUE(s.ok()) << s.message();
  return std::move(s.value());
}

// log p(prompt[i] | prompt[:i]) for i >= 1 from one forward over the whole prompt.
std::vector<double> reference(const Model& m, ThreadPool& pool, const std::vector<int32_t>& p) {
  KvStore kv = make_store(m, kv_budget_bytes(m.hp, 256, 1, 16));
  Forward f(m, pool, kv);
  auto a = kv.add_sequence({});
  const KvAppend app{a->seq, p};
  EXPECT_TRUE(kv.reserve(std::span<const KvAppend>(&app, 1))->fits());
  std::vector<float> lg;
  BatchEntry e{a->seq, p, true};
  EXPECT_TRUE(f.run(std::span<const BatchEntry>(&e, 1), lg).ok());
  const int32_t V = m.hp.n_vocab;
  std::vector<double> out;
  for (size_t i = 1; i < p.size(); ++i) {
    const float* row = lg.data() + (i - 1) * static_cast<size_t>(V);
    double mx = row[0], sum = 0;
    for (int32_t v = 1; v < V; ++v) mx = std::max<double>(mx, row[v]);
    for (int32_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    out.push_back(row[p[i]] - mx - std::log(sum));
  }
  return out;
}

TEST(PromptLogprobs, EveryPromptTokenIsScoredThroughCacheAndChunks) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = test_long_prompt(*m, 70);
  const std::vector<double> want = reference(*m, pool, prompt);

  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 256, 2, 16));
  SchedulerConfig sc;
  sc.n_ctx = 256;
  sc.max_batch_tokens = 24;  // the prompt prefills in several chunks
  Scheduler s(*m, pool, kv, sc);
  // A plain request first: its pages go into the prefix cache.
  RequestParams warm;
  warm.prompt = prompt;
  warm.max_tokens = 1;
  warm.sampling.temperature = 0;
  s.submit(warm, [](const RequestEvent&) {});
  while (s.step()) {
  }
  for (int32_t max_tokens : {0, 2}) {
    RequestParams p = warm;
    p.max_tokens = max_tokens;
    p.prompt_logprobs = true;
    p.n_logprobs = 2;
    std::vector<RequestEvent> events;
    s.submit(p, [&](const RequestEvent& e) { events.push_back(e); });
    while (s.step()) {
    }
    ASSERT_EQ(events.size(), static_cast<size_t>(max_tokens) + 1);
    const RequestEvent& first = events.front();
    const RequestEvent& last = events.back();
    EXPECT_EQ(last.reason, FinishReason::length);
    EXPECT_EQ(last.cached_tokens, 0) << "a scored prompt must not come from the cache";
    EXPECT_EQ(last.completion_tokens, max_tokens);
    ASSERT_EQ(first.prompt_logprobs.size(), prompt.size() - 1);
    for (size_t k = 1; k < events.size(); ++k) EXPECT_TRUE(events[k].prompt_logprobs.empty());
    for (size_t i = 0; i < want.size(); ++i) {
      const PromptLogprob& lp = first.prompt_logprobs[i];
      EXPECT_NEAR(lp.logprob, want[i], 2e-3) << "prompt token " << i + 1;
      ASSERT_EQ(lp.top.size(), 2u);
      EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
      EXPECT_GE(lp.top[0].logprob + 1e-6f, lp.logprob);
      if (lp.top[0].token == prompt[i + 1]) {
        EXPECT_EQ(lp.top[0].logprob, lp.logprob);
      }
    }
    EXPECT_EQ(s.stats().running, 0);
    EXPECT_EQ(s.stats().waiting, 0);
  }
}

// issue 44: sieve_requests_running stayed at 1 after a max_tokens 0 request.
TEST(PromptLogprobs, MaxTokensZeroLeavesNothingRunning) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 256, 2, 16));
  SchedulerConfig sc;
  sc.n_ctx = 256;
  Scheduler s(*m, pool, kv, sc);
  RequestParams p;
  p.prompt = test_long_prompt(*m, 20);
  p.max_tokens = 0;
  FinishReason reason = FinishReason::none;
  s.submit(p, [&](const RequestEvent& e) { reason = e.reason; });
  // One step admits and finishes it; the engine then idles without another step, so the
  // gauges must be right after this one.
  ASSERT_TRUE(s.step());
  EXPECT_EQ(reason, FinishReason::length);
  EXPECT_EQ(s.stats().running, 0);
  EXPECT_EQ(s.stats().waiting, 0);
}

}  // namespace
}  // namespace sieve

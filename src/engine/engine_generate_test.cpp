// SequenceEngine, the generation loop of `sieve run`, `bench`, `analyze` and local eval, on the
// real SmolLM2 model: it is the serving engine's loop (the same tokens as a request among
// others in an engine of many sequences), and it keeps the CLI's single-sequence contract:
// the prompt may fill the context, the last token is never written, -n 0 still prefills, a
// stop from the caller ends the count, and errors say what to change.
#include <gtest/gtest.h>

#include <mutex>

#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/engine_test_util.h"

namespace sieve {
namespace {

std::vector<int32_t> prompt_of(const Model& m) {
  return m.tokenizer->encode(
      "The keeper climbed the lighthouse stairs at dusk, as he had every evening for thirty "
      "years, and",
      true, false);
}

std::unique_ptr<SequenceEngine> make(std::shared_ptr<const Model> m, ThreadPool& pool,
                                     int32_t n_ctx) {
  SequenceEngineConfig sc;
  sc.n_ctx = n_ctx;
  sc.pool = &pool;
  auto se = SequenceEngine::create(std::move(m), sc);
  EXPECT_TRUE(se.ok()) << se.message();
  return se.ok() ? std::move(*se) : nullptr;
}

std::vector<int32_t> run_one(SequenceEngine& se, const std::vector<int32_t>& prompt,
                             const GenerateOptions& g, GenerateStats* st = nullptr) {
  std::vector<int32_t> out;
  auto r = se.generate(prompt, g, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.message();
  if (st && r.ok()) *st = *r;
  return out;
}

// The same request in an engine configured as the server's (8 sequences, time-budgeted steps).
std::vector<int32_t> run_in_server_engine(std::shared_ptr<const Model> m,
                                          const std::vector<int32_t>& prompt,
                                          const GenerateOptions& g) {
  EngineConfig ec;
  ec.threads = 2;
  ec.n_ctx = 1024;
  auto e = Engine::create(std::move(m), ec);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return {};
  std::mutex mu;
  std::vector<int32_t> out;
  RequestParams rp;
  rp.prompt = prompt;
  rp.max_tokens = g.n_predict;
  rp.sampling = g.sampling;
  rp.stop_at_eog = g.stop_at_eog;
  rp.policy = g.policy;
  (*e)->submit(std::move(rp), [&](const RequestEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    if (!ev.finished) out.push_back(ev.token);
  });
  EXPECT_TRUE((*e)->wait_idle(std::chrono::seconds(300)));
  return out;
}

TEST(SequenceEngine, GeneratesWhatTheServingEngineGenerates) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(*m);
  for (const char* sampling : {"greedy", "seeded"}) {
    for (const char* policy : {"dense", "tokenselect"}) {
      // A fresh engine: a warm prefix cache may change a sparse policy's text (eval keeps
      // one only for policy_allows_prefix_reuse).
      auto se = make(m, pool, 1024);
      ASSERT_TRUE(se);
      GenerateOptions g;
      g.n_predict = test_short_mode() ? 8 : 24;
      g.stop_at_eog = false;
      if (std::string(sampling) == "greedy") {
        g.sampling.temperature = 0;
      } else {
        g.sampling.seed = 1234;
      }
      auto p = make_policy(policy, std::string(policy) == "dense"
                                       ? std::vector<std::string>{}
                                       : std::vector<std::string>{"sinks=2", "local=4", "top_k=8"});
      ASSERT_TRUE(p.ok()) << p.message();
      g.policy = std::make_shared<const PolicyConfig>(*p);
      GenerateStats st;
      const std::vector<int32_t> a = run_one(*se, prompt, g, &st);
      EXPECT_EQ(static_cast<int32_t>(a.size()), g.n_predict);
      EXPECT_EQ(st.completion_tokens, g.n_predict);
      EXPECT_EQ(a, run_in_server_engine(m, prompt, g)) << sampling << " " << policy;
      if (std::string(policy) != "dense") continue;
      // Again on the same engine: the prompt's full pages come from the prefix cache and the
      // text is the same.
      EXPECT_EQ(a, run_one(*se, prompt, g, &st)) << sampling << " " << policy;
      EXPECT_GT(st.cached_tokens, 0);
    }
  }
}

TEST(SequenceEngine, KeepsTheSingleSequenceContract) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(*m);
  const int32_t n = static_cast<int32_t>(prompt.size());
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.stop_at_eog = false;
  g.n_predict = 100;
  {
    // The prompt fills the context: one token, written nowhere. Three tokens of room: four.
    auto se = make(m, pool, n);
    ASSERT_TRUE(se);
    EXPECT_EQ(run_one(*se, prompt, g).size(), 1u);
    auto se3 = make(m, pool, n + 3);
    ASSERT_TRUE(se3);
    EXPECT_EQ(run_one(*se3, prompt, g).size(), 4u);
  }
  auto se = make(m, pool, 256);
  ASSERT_TRUE(se);
  {
    // -n 0: the prompt is prefilled (its progress reported), nothing generated.
    GenerateOptions g0 = g;
    g0.n_predict = 0;
    int64_t last_done = 0;
    g0.on_prefill_progress = [&](int64_t done, int64_t total) {
      EXPECT_EQ(total, n);
      last_done = done;
    };
    GenerateStats st;
    EXPECT_TRUE(run_one(*se, prompt, g0, &st).empty());
    EXPECT_EQ(st.completion_tokens, 0);
    EXPECT_EQ(st.prompt_tokens, n);
    EXPECT_EQ(last_done, n);
    EXPECT_GT(st.prefill_ms, 0);
  }
  {
    // The caller stops after 3 tokens: 3 counted, whatever the engine had in flight.
    int k = 0;
    auto r = se->generate(prompt, g, [&](int32_t) { return ++k < 3; });
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(k, 3);
    EXPECT_EQ(r->completion_tokens, 3);
  }
  auto err = [&](std::span<const int32_t> p, const GenerateOptions& o) {
    auto r = se->generate(p, o, [](int32_t) { return true; });
    return r.ok() ? std::string() : r.message();
  };
  EXPECT_NE(err({}, g).find("the prompt is empty; give some text with -p or -f"),
            std::string::npos);
  const std::vector<int32_t> long_prompt(257, prompt[1]);
  EXPECT_NE(err(long_prompt, g).find("more than the context size 256; shorten it or raise -c"),
            std::string::npos);
  const std::vector<int32_t> bad = {1, m->hp.n_vocab};
  EXPECT_NE(err(bad, g).find("outside the vocabulary"), std::string::npos);
  GenerateOptions hot = g;
  hot.sampling.temperature = -5;
  hot.sampling.top_p = 7;
  EXPECT_FALSE(err(prompt, hot).empty());
}

}  // namespace
}  // namespace sieve

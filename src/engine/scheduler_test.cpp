// Continuous batching on the real SmolLM2 model: mixed batches equal single runs, and a
// stress run with preemption and cancellation keeps the KV invariants and loses nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/engine_test_util.h"
#include "engine/kv_binding.h"
#include "engine/scheduler.h"
#include "gguf/test_models.h"

namespace sieve {
namespace {

std::shared_ptr<const Model> smollm2() {
  return test_smollm2();
}
bool short_mode() {
  return test_short_mode();
}

std::vector<int32_t> prompt_of(const Model& m, int i) {
  static const char* texts[] = {
      "The history of the lighthouse begins in",
      "def fibonacci(n):\n    if n < 2:\n        return n\n",
      "Water boils at one hundred degrees Celsius at sea level, but on a mountain",
      "List three colours of the rainbow:",
      "Once upon a time, in a small village by the sea, there lived an old fisherman who",
  };
  std::string t = texts[i % 5];
  for (int k = 0; k < i / 5; ++k) t += " And then, once more, the story went on.";
  return m.tokenizer->encode(t, true, false);
}

KvStore make_store(const Model& m, int64_t budget, bool prefix_cache = true) {
  KvConfig c = kv_config_for(m.hp, budget, 16, "test");
  c.prefix_cache = prefix_cache;
  auto s = KvStore::create(c);
  EXPECT_TRUE(s.ok()) << s.message();
  return std::move(s.value());
}

TEST(Forward, MixedBatchEqualsSingleSequences) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  // Three sequences: a long prefill chunk, a short one, and one decoding after a prompt.
  std::vector<std::vector<int32_t>> prompts = {prompt_of(*m, 12), prompt_of(*m, 1),
                                               prompt_of(*m, 2)};
  // single runs
  std::vector<std::vector<float>> single;
  for (auto& p : prompts) {
    KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 512, 1, 16), false);
    Forward f(*m, pool, kv);
    auto a = kv.add_sequence({});
    ASSERT_TRUE(a.ok());
    const KvAppend app{a->seq, p};
    ASSERT_TRUE(kv.reserve(std::span<const KvAppend>(&app, 1))->fits());
    std::vector<float> lg;
    BatchEntry e{a->seq, p, true};
    ASSERT_TRUE(f.run(std::span<const BatchEntry>(&e, 1), lg).ok());
    single.push_back(lg);
  }
  // mixed: sequence 2's prompt split in two steps, the second step batched with the others
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 512, 3, 16), false);
  Forward f(*m, pool, kv);
  std::vector<KvSeqId> seqs;
  for (size_t i = 0; i < 3; ++i) seqs.push_back(kv.add_sequence({})->seq);
  const size_t split = prompts[2].size() - 1;
  {
    const KvAppend app{seqs[2], std::span<const int32_t>(prompts[2]).first(split)};
    ASSERT_TRUE(kv.reserve(std::span<const KvAppend>(&app, 1))->fits());
    std::vector<float> lg;
    BatchEntry e{seqs[2], std::span<const int32_t>(prompts[2]).first(split), true};
    ASSERT_TRUE(f.run(std::span<const BatchEntry>(&e, 1), lg).ok());
  }
  std::vector<KvAppend> apps = {{seqs[0], prompts[0]},
                                {seqs[1], prompts[1]},
                                {seqs[2], std::span<const int32_t>(prompts[2]).subspan(split)}};
  ASSERT_TRUE(kv.reserve(apps)->fits());
  std::vector<BatchEntry> batch = {
      {seqs[0], prompts[0], true},
      {seqs[1], prompts[1], true},
      {seqs[2], std::span<const int32_t>(prompts[2]).subspan(split), false}};
  std::vector<float> lg;
  ASSERT_TRUE(f.run(batch, lg).ok());
  const size_t V = m->hp.n_vocab;
  // rows: all of seq 0, all of seq 1, the last of seq 2
  size_t row = 0;
  float max_err = 0;
  for (size_t s = 0; s < 3; ++s) {
    const size_t n = s < 2 ? prompts[s].size() : 1;
    const size_t first = s < 2 ? 0 : prompts[s].size() - 1;
    for (size_t t = 0; t < n; ++t, ++row) {
      const float* a = lg.data() + row * V;
      const float* b = single[s].data() + (first + t) * V;
      int32_t am = 0, bm = 0;
      for (size_t v = 0; v < V; ++v) {
        max_err = std::max(max_err, std::fabs(a[v] - b[v]));
        if (a[v] > a[am]) am = static_cast<int32_t>(v);
        if (b[v] > b[bm]) bm = static_cast<int32_t>(v);
      }
      EXPECT_EQ(am, bm) << "sequence " << s << " token " << t;
    }
  }
  // Same kernels, same activations: only the split-K/chunking order may differ.
  EXPECT_LT(max_err, 1e-3f);
  EXPECT_TRUE(kv.check_invariants().ok());
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::none;
  std::string error;
  int events_after_final = 0;
  bool finished = false;
};

TEST(Scheduler, ConcurrentGreedyEqualsSingleRuns) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  const int n_req = short_mode() ? 3 : 6;
  SchedulerConfig sc;
  sc.max_batch_tokens = 24;  // forces chunked prefill mixed with decodes
  sc.n_ctx = 512;
  // reference: each request alone, same step configuration
  std::vector<std::vector<int32_t>> ref(n_req);
  for (int i = 0; i < n_req; ++i) {
    KvStore kv1 = make_store(*m, kv_budget_bytes(m->hp, 512, 1, 16), false);
    Scheduler s1(*m, pool, kv1, sc);
    RequestParams p;
    p.prompt = prompt_of(*m, i * 3);
    p.max_tokens = 12;
    p.sampling.temperature = 0;
    p.stop_at_eog = false;
    s1.submit(p, [&](const RequestEvent& e) {
      if (e.token >= 0) ref[i].push_back(e.token);
    });
    while (s1.step()) {
    }
  }
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 512, n_req, 16), false);
  Scheduler s(*m, pool, kv, sc);
  std::map<RequestId, Collected> out;
  std::vector<RequestId> ids;
  for (int i = 0; i < n_req; ++i) {
    RequestParams p;
    p.prompt = prompt_of(*m, i * 3);
    p.max_tokens = 12;
    p.sampling.temperature = 0;
    p.stop_at_eog = false;
    ids.push_back(s.submit(p, [&](const RequestEvent& e) {
      Collected& c = out[e.id];
      if (c.finished) c.events_after_final++;
      if (e.token >= 0) c.tokens.push_back(e.token);
      if (e.finished) c.finished = true, c.reason = e.reason;
    }));
  }
  while (s.step()) ASSERT_TRUE(kv.check_invariants().ok());
  for (int i = 0; i < n_req; ++i) {
    const Collected& c = out[ids[i]];
    EXPECT_TRUE(c.finished);
    EXPECT_EQ(c.reason, FinishReason::length);
    EXPECT_EQ(c.tokens, ref[i]) << "request " << i;
    EXPECT_EQ(c.events_after_final, 0);
  }
  EXPECT_EQ(kv.stats().n_pages_used, 0);
}

TEST(Scheduler, StressPreemptionAndCancellationLoseNothing) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  // A pool far too small for all requests at once: forces preemption.
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 96, 2, 16));
  SchedulerConfig sc;
  sc.max_batch_tokens = 32;
  sc.max_running = 6;
  sc.n_ctx = 160;
  Scheduler s(*m, pool, kv, sc);
  std::mt19937 rng(3);
  std::map<RequestId, Collected> out;
  std::vector<RequestId> ids;
  const int n_req = short_mode() ? 8 : 14;
  for (int i = 0; i < n_req; ++i) {
    RequestParams p;
    p.prompt = prompt_of(*m, (i * 7) % 15);
    p.max_tokens = 4 + (i % 5) * 4;
    p.sampling.temperature = 0;
    p.stop_at_eog = false;
    ids.push_back(s.submit(p, [&](const RequestEvent& e) {
      Collected& c = out[e.id];
      if (c.finished) c.events_after_final++;
      if (e.token >= 0) c.tokens.push_back(e.token);
      if (e.finished) c.finished = true, c.reason = e.reason, c.error = e.error;
    }));
  }
  // an invalid request is answered with an error, not a crash
  RequestParams bad;
  bad.prompt = {1, 2, m->hp.n_vocab + 5};
  const RequestId bad_id = s.submit(bad, [&](const RequestEvent& e) {
    out[e.id].finished = e.finished;
    out[e.id].reason = e.reason;
  });
  int steps = 0;
  std::set<RequestId> cancelled;
  while (s.step()) {
    ASSERT_TRUE(kv.check_invariants().ok());
    if (++steps % 5 == 0) {
      const RequestId c = ids[rng() % ids.size()];
      if (!out[c].finished) {
        s.cancel(c);
        cancelled.insert(c);
      }
    }
    ASSERT_LT(steps, 5000);
  }
  EXPECT_EQ(out[bad_id].reason, FinishReason::error);
  for (RequestId id : ids) {
    const Collected& c = out[id];
    EXPECT_TRUE(c.finished) << id;
    EXPECT_EQ(c.events_after_final, 0);
    if (cancelled.count(id) && c.reason == FinishReason::cancelled) continue;
    EXPECT_EQ(c.reason, FinishReason::length) << id << " " << c.error;
  }
  EXPECT_GT(s.stats().preemptions, 0);
  EXPECT_EQ(kv.stats().n_pages_used, 0);
  EXPECT_TRUE(kv.check_invariants().ok());
}

TEST(Scheduler, PromptLargerThanTheWholePoolIsRefusedWhileOthersRun) {
  // Before: it waited until nothing else ran, then failed as an engine error (a 500).
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 64, 1, 16));
  SchedulerConfig sc;
  sc.n_ctx = 1024;
  Scheduler s(*m, pool, kv, sc);
  RequestParams small;
  small.prompt = prompt_of(*m, 0);
  small.max_tokens = 24;
  small.stop_at_eog = false;
  RequestEvent small_last;
  s.submit(small, [&](const RequestEvent& e) { small_last = e; });
  ASSERT_TRUE(s.step());
  // Admission needs the whole prompt's pages under every policy, an evicting one too.
  for (const char* preset : {"dense", "h2o"}) {
    RequestParams big;
    for (int i = 0; i < 200; ++i) big.prompt.push_back(100 + i);
    big.max_tokens = 4;
    big.policy = std::make_shared<const PolicyConfig>(*make_policy(preset));
    RequestEvent last;
    s.submit(big, [&](const RequestEvent& e) { last = e; });
    ASSERT_TRUE(s.step());
    ASSERT_TRUE(last.finished) << preset << ": refused at its first admission";
    EXPECT_FALSE(small_last.finished) << preset << ": while the small request still runs";
    EXPECT_EQ(last.reason, FinishReason::error);
    EXPECT_EQ(last.error_code, "context_length_exceeded");
    EXPECT_NE(last.error.find("KV memory budget"), std::string::npos) << last.error;
  }
  while (s.step()) {
  }
  EXPECT_EQ(small_last.reason, FinishReason::length) << small_last.error;
  // Any request the engine cannot run as given carries a code (a server's 400).
  RequestParams empty;
  RequestEvent e0;
  s.submit(empty, [&](const RequestEvent& e) { e0 = e; });
  EXPECT_EQ(e0.error_code, "invalid_request");
}

// Greedy tokens of one request run alone.
std::vector<int32_t> run_alone(const Model& m, ThreadPool& pool, const SchedulerConfig& sc,
                               const RequestParams& p) {
  KvStore kv = make_store(m, kv_budget_bytes(m.hp, sc.n_ctx, 1, 16), false);
  Scheduler s(m, pool, kv, sc);
  std::vector<int32_t> out;
  s.submit(p, [&](const RequestEvent& e) {
    if (e.token >= 0) out.push_back(e.token);
  });
  while (s.step()) {
  }
  return out;
}

TEST(Scheduler, PriorityOrdersAdmissionAndAPreemptedRequestLosesNoTokens) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  SchedulerConfig sc;
  sc.max_running = 1;  // one at a time: the order of admission is the order of completion
  sc.n_ctx = 256;
  auto params = [&](int prompt, int32_t priority, int32_t max_tokens) {
    RequestParams p;
    p.prompt = prompt_of(*m, prompt);
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0;
    p.stop_at_eog = false;
    p.priority = priority;
    return p;
  };
  const RequestParams pa = params(0, 5, 12);
  const std::vector<int32_t> ref_a = run_alone(*m, pool, sc, pa);
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 256, 2, 16), false);
  Scheduler s(*m, pool, kv, sc);
  std::map<RequestId, Collected> out;
  std::map<RequestId, int32_t> preempted;
  std::vector<RequestId> finish_order;
  auto cb = [&](const RequestEvent& e) {
    Collected& c = out[e.id];
    if (e.token >= 0) c.tokens.push_back(e.token);
    if (e.finished) {
      c.finished = true, c.reason = e.reason;
      preempted[e.id] = e.n_preempted;
      finish_order.push_back(e.id);
    }
  };
  const RequestId a = s.submit(pa, cb);
  while (out[a].tokens.size() < 3) ASSERT_TRUE(s.step());
  // Arrivals while A (priority 5) runs: C (5) waits behind A; B (0) and D (1) go first, B
  // preempting A.
  const RequestId b = s.submit(params(1, 0, 4), cb);
  const RequestId c = s.submit(params(2, 5, 4), cb);
  const RequestId d = s.submit(params(3, 1, 4), cb);
  while (s.step()) ASSERT_TRUE(kv.check_invariants().ok());
  EXPECT_EQ(finish_order, std::vector<RequestId>({b, d, a, c}));
  EXPECT_GE(preempted[a], 1);
  EXPECT_EQ(preempted[c], 0);
  // A resumed from prompt + its generated tokens: nothing lost, nothing repeated, and the
  // same greedy continuation as alone.
  EXPECT_EQ(out[a].tokens, ref_a);
  for (RequestId id : {a, b, c, d}) EXPECT_EQ(out[id].reason, FinishReason::length);
  EXPECT_EQ(kv.stats().n_pages_used, 0);
}

TEST(Scheduler, EqualPrioritiesAreFirstComeFirstServed) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  SchedulerConfig sc;
  sc.max_running = 1;
  sc.n_ctx = 256;
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 256, 1, 16), false);
  Scheduler s(*m, pool, kv, sc);
  std::vector<RequestId> order, ids;
  for (int i = 0; i < 4; ++i) {
    RequestParams p;
    p.prompt = prompt_of(*m, i);
    p.max_tokens = 2;
    p.stop_at_eog = false;
    ids.push_back(s.submit(p, [&](const RequestEvent& e) {
      if (e.finished) order.push_back(e.id);
    }));
  }
  while (s.step()) {
  }
  EXPECT_EQ(order, ids);
  EXPECT_EQ(s.stats().preemptions, 0);
}

// Decodes ride in every step and a long prompt arriving meanwhile is prefilled in chunks the
// step budget bounds: the running stream gets a token in every step (its gap is one step), and
// a step never carries the whole prompt.
TEST(Scheduler, RunningStreamGetsATokenEveryStepWhileALongPromptIsAdmitted) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  SchedulerConfig sc;
  sc.n_ctx = 1024;
  sc.max_batch_tokens = 512;
  sc.prefill_chunk = 512;
  // A budget below any step's cost: every step carries the stream's token and the planner's
  // smallest prefill chunk, whatever the machine's speed (auto's budget comes from measured
  // step times, so under load a whole short prompt could fit one step: StepPlanner tests
  // cover auto's arithmetic).
  sc.max_step_ms = 1;
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 1024, 2, 16, 0, 512), false);
  Scheduler s(*m, pool, kv, sc);
  RequestParams stream;
  stream.prompt = prompt_of(*m, 4);
  stream.max_tokens = 200;
  stream.sampling.temperature = 0;
  stream.stop_at_eog = false;
  std::vector<int64_t> stream_token_steps;
  int64_t long_first_token_step = -1;
  s.submit(stream, [&](const RequestEvent& e) {
    if (e.token >= 0) stream_token_steps.push_back(s.stats().steps);
  });
  // Let the stream decode before the prompt arrives.
  while (stream_token_steps.size() < 20) ASSERT_TRUE(s.step());
  RequestParams long_prompt;
  long_prompt.prompt = test_long_prompt(*m, short_mode() ? 300 : 700);
  long_prompt.max_tokens = 2;
  long_prompt.sampling.temperature = 0;
  long_prompt.stop_at_eog = false;
  const int64_t submitted_at = s.stats().steps;
  s.submit(long_prompt, [&](const RequestEvent& e) {
    if (e.token >= 0 && long_first_token_step < 0) long_first_token_step = s.stats().steps;
  });
  int32_t max_chunk = 0;
  while (long_first_token_step < 0) {
    ASSERT_TRUE(s.step());
    max_chunk = std::max(max_chunk, s.stats().last_step_prefill_tokens);
    EXPECT_GT(s.stats().step_budget_ms, 0);
  }
  // the prompt took several steps, their chunks bounded by time rather than by the token budget
  EXPECT_GT(long_first_token_step - submitted_at, 1);
  EXPECT_LT(max_chunk, sc.max_batch_tokens - 1);
  // every step of that stretch gave the stream a token
  for (size_t i = 1; i < stream_token_steps.size(); ++i) {
    if (stream_token_steps[i] > long_first_token_step) break;
    EXPECT_EQ(stream_token_steps[i] - stream_token_steps[i - 1], 1) << "token " << i;
  }
  while (s.step()) {
  }
  EXPECT_EQ(stream_token_steps.size(), 200u);
}

// The prefix cache is keyed by policy (a sparse prefill computes other K/V than a dense one);
// a request's cache_salt replaces that key, which is how the GPU bench lets every policy decode
// over one prefill.
TEST(Scheduler, CacheSaltLetsPoliciesSharePrefixPages) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 256, 2, 16));
  SchedulerConfig sc;
  sc.n_ctx = 256;
  Scheduler s(*m, pool, kv, sc);
  auto cached_of = [&](RequestParams p) {
    int32_t cached = -1;
    s.submit(std::move(p), [&](const RequestEvent& e) {
      if (e.finished) cached = e.cached_tokens;
    });
    while (s.step()) {
    }
    return cached;
  };
  RequestParams p;
  p.prompt = prompt_of(*m, 40);  // > 2 pages
  p.max_tokens = 1;
  p.sampling.temperature = 0;
  p.policy = std::make_shared<const PolicyConfig>(*make_policy("dense"));
  ASSERT_EQ(cached_of(p), 0);
  RequestParams q = p;
  q.policy = std::make_shared<const PolicyConfig>(*make_policy("tokenselect"));
  EXPECT_EQ(cached_of(q), 0);  // dense's pages are not tokenselect's
  const int32_t full_pages = static_cast<int32_t>((p.prompt.size() - 1) / 16 * 16);
  p.cache_salt = q.cache_salt = "shared";
  ASSERT_EQ(cached_of(p), 0);  // a new namespace
  EXPECT_EQ(cached_of(q), full_pages);
}

TEST(Scheduler, StopStringsSpanTokensAndAreNeverEmitted) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  // Find what greedy generates, then stop on a string inside it.
  KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 256, 2, 16));
  SchedulerConfig sc;
  sc.n_ctx = 256;
  Scheduler s(*m, pool, kv, sc);
  std::string full;
  RequestParams p;
  p.prompt = prompt_of(*m, 4);
  p.max_tokens = 24;
  p.sampling.temperature = 0;
  p.stop_at_eog = false;
  s.submit(p, [&](const RequestEvent& e) { full += e.text; });
  while (s.step()) {
  }
  ASSERT_GT(full.size(), 12u);
  const std::string stop = full.substr(full.size() / 2, 5);
  std::string got;
  FinishReason reason = FinishReason::none;
  p.stop = {stop};
  s.submit(p, [&](const RequestEvent& e) {
    got += e.text;
    if (e.finished) reason = e.reason;
  });
  while (s.step()) {
  }
  EXPECT_EQ(reason, FinishReason::stop);
  EXPECT_EQ(got, full.substr(0, full.find(stop)));
}

TEST(Engine, ThreadedSubmitCancelAndPrefixHit) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  EngineConfig cfg;
  cfg.threads = 2;
  cfg.n_ctx = 512;
  cfg.max_running = 4;
  auto e = Engine::create(m, cfg);
  ASSERT_TRUE(e.ok()) << e.message();
  std::mutex mu;
  std::map<RequestId, Collected> out;
  std::vector<int32_t> prompt = prompt_of(*m, 40);  // > 2 pages
  auto cb = [&](const RequestEvent& ev) {
    std::lock_guard<std::mutex> l(mu);
    if (ev.token >= 0) out[ev.id].tokens.push_back(ev.token);
    if (ev.finished) out[ev.id].finished = true, out[ev.id].reason = ev.reason;
  };
  RequestParams p;
  p.prompt = prompt;
  p.max_tokens = 400;
  p.sampling.temperature = 0;
  p.stop_at_eog = false;
  const RequestId a = (*e)->submit(p, cb);
  (*e)->cancel(a);
  ASSERT_TRUE((*e)->wait_idle(std::chrono::seconds(60)));
  EXPECT_EQ(out[a].reason, FinishReason::cancelled);
  EXPECT_EQ((*e)->kv_stats().n_pages_used, 0);
  p.max_tokens = 2;
  int32_t cached = -1;
  const RequestId b = (*e)->submit(p, [&](const RequestEvent& ev) {
    cb(ev);
    if (ev.finished) cached = ev.cached_tokens;
  });
  ASSERT_TRUE((*e)->wait_idle(std::chrono::seconds(60)));
  EXPECT_EQ(out[b].reason, FinishReason::length);
  (void)cached;
  // the same prompt again: its full pages come from the prefix cache
  int32_t cached2 = -1;
  (*e)->submit(p, [&](const RequestEvent& ev) {
    if (ev.finished) cached2 = ev.cached_tokens;
  });
  ASSERT_TRUE((*e)->wait_idle(std::chrono::seconds(60)));
  EXPECT_EQ(cached2, static_cast<int32_t>((prompt.size() - 1) / 16 * 16));
}

}  // namespace
}  // namespace sieve

namespace sieve {
namespace {

// A UniPrefill request is prefilled in one chunk even when the step budget is small (its
// selection needs the prompt's end), beside a decoding dense request; both equal their solo
// runs, and the dense one is never dropped from.
TEST(Scheduler, UniPrefillRequestPrefillsInOneChunkBesideDecodes) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  ThreadPool pool(2);
  SchedulerConfig sc;
  sc.max_batch_tokens = 24;
  sc.n_ctx = 512;
  auto up = std::make_shared<PolicyConfig>(*make_policy("uniprefill"));
  up->up_min_prompt = 0;
  up->up_layers = {3};
  up->up_p = 0.5f;
  up->up_block = 16;
  up->up_sinks = 16;
  up->up_tail = 32;
  up->up_queries = 32;
  auto dense = std::make_shared<PolicyConfig>(*make_policy("dense"));
  auto params = [&](int i, PolicyPtr policy) {
    RequestParams p;
    p.prompt = prompt_of(*m, i);
    p.max_tokens = 6;
    p.sampling.temperature = 0;
    p.stop_at_eog = false;
    p.policy = std::move(policy);
    return p;
  };
  struct Out {
    std::vector<int32_t> tokens;
    SparseStats sparse;
    FinishReason reason = FinishReason::none;
  };
  auto run = [&](std::vector<RequestParams> reqs) {
    KvStore kv = make_store(*m, kv_budget_bytes(m->hp, 512, 2, 16, 0, 512), false);
    Scheduler s(*m, pool, kv, sc);
    std::map<RequestId, Out> out;
    std::vector<RequestId> ids;
    for (auto& p : reqs) {
      ids.push_back(s.submit(p, [&](const RequestEvent& e) {
        Out& o = out[e.id];
        if (e.token >= 0) o.tokens.push_back(e.token);
        if (e.finished) o.reason = e.reason, o.sparse = e.sparse;
      }));
    }
    int steps = 0;
    while (s.step() && ++steps < 1000) {
    }
    EXPECT_LT(steps, 1000);
    std::vector<Out> r;
    for (RequestId id : ids) r.push_back(out[id]);
    return r;
  };
  const int long_i = short_mode() ? 100 : 200;  // prompt_of(i) grows by a sentence per 5
  const std::vector<Out> solo_dense = run({params(1, dense)});
  const std::vector<Out> solo_up = run({params(long_i, up)});
  const std::vector<Out> both = run({params(1, dense), params(long_i, up)});
  ASSERT_EQ(both.size(), 2u);
  for (const Out& o : both) EXPECT_EQ(o.reason, FinishReason::length);
  EXPECT_EQ(both[0].tokens, solo_dense[0].tokens);
  EXPECT_EQ(both[1].tokens, solo_up[0].tokens);
  EXPECT_EQ(both[1].sparse.prefill_selections, 1);  // one chunk, one selection layer
  EXPECT_GT(both[1].sparse.prefill_dropped, 0);
  EXPECT_EQ(both[1].sparse.prefill_dropped, solo_up[0].sparse.prefill_dropped);
  EXPECT_EQ(both[0].sparse.prefill_dropped, 0);
}

}  // namespace
}  // namespace sieve

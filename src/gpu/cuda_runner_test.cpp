// The CUDA runner behind the engine against the CPU reference on SmolLM2: logits of a prompt
// that spans two prefill chunks, greedy continuations, TokenSelect decode (the sparse path
// really runs and matches the CPU pipeline with the same knobs), the selection cache, and 8
// concurrent greedy requests that equal the same requests one by one; and Qwen2.5-Coder-0.5B
// under YaRN x4 against the CPU's YaRN. Skips without a CUDA device or without the model.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/engine_test_util.h"
#include "engine/kv_binding.h"
#include "engine/prompt_logits.h"
#include "engine/sampler.h"
#include "gpu/cuda_runner.h"

namespace sieve {
namespace {

#define REQUIRE_GPU_AND_MODEL()                           \
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device"; \
  auto model = test_smollm2();                            \
  if (!model) GTEST_SKIP() << "SmolLM2 test model not found";

// Largest logit difference relative to the spread of the reference logits.
float rel_diff(const std::vector<float>& ref, const std::vector<float>& got) {
  float lo = ref[0], hi = ref[0];
  for (float x : ref) lo = std::min(lo, x), hi = std::max(hi, x);
  return max_abs_diff(ref, got) / (hi - lo);
}

PolicyPtr dense() {
  return std::make_shared<const PolicyConfig>(*make_policy("dense"));
}

// CPU greedy continuation under a policy (nullptr: dense).
std::vector<int32_t> cpu_greedy(const Model& m, const std::vector<int32_t>& prompt, int n,
                                PolicyPtr policy) {
  auto r = cpu_greedy_tokens(m, prompt, n, std::move(policy));
  EXPECT_TRUE(r.ok()) << r.message();
  return r ? *r : std::vector<int32_t>{};
}

// The engine on the CUDA runner; no prefix cache, so every request computes its own KV.
std::unique_ptr<Engine> gpu_engine(std::shared_ptr<const Model> m, int32_t max_running) {
  EngineConfig ec;
  ec.n_ctx = 4096;
  ec.max_running = max_running;
  ec.max_batch_tokens = 512;
  ec.prefix_cache = false;
  ec.max_step_ms = 0;  // token-budget steps, as the CLI runs the GPU
  ec.runner_factory = cuda_runner_factory({0.5});
  auto e = Engine::create(std::move(m), ec);
  EXPECT_TRUE(e.ok()) << e.message();
  return e ? std::move(e.value()) : nullptr;
}

std::vector<int32_t> gpu_greedy(Engine& e, const std::vector<int32_t>& prompt, int n,
                                PolicyPtr policy, SparseStats* stats = nullptr) {
  auto r = greedy_tokens_on(e, prompt, n, policy ? std::move(policy) : dense(), stats);
  EXPECT_TRUE(r.ok()) << r.message();
  return r ? *r : std::vector<int32_t>{};
}

// The runner directly, over a store of device rows (256 MiB of pages, no prefix cache).
Status runner_on_store(const Model& m, const RunnerLimits& lim, std::unique_ptr<CudaRunner>& r,
                       std::unique_ptr<KvStore>& store) {
  auto cr = CudaRunner::create(m, lim, {0.5});
  if (!cr) return cr.error();
  r = std::move(cr.value());
  KvConfig kc = kv_config_for(m.hp, int64_t{256} << 20, 16, "test");
  kc.host_rows = false;
  kc.prefix_cache = false;
  auto st = KvStore::create(kc);
  if (!st) return st.error();
  store = std::make_unique<KvStore>(std::move(st.value()));
  return r->attach(*store);
}

TEST(CudaRunner, DenseLogitsMatchTheCpuAcrossChunksAndSteps) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 700);  // chunks of 512 + 188
  ThreadPool pool(2);
  auto ref = prompt_logits(*model, pool, prompt, 512);
  ASSERT_TRUE(ref.ok()) << ref.message();
  const int64_t V = model->hp.n_vocab;
  const std::vector<float> last(ref->end() - V, ref->end());

  // A 512 + 188 prefill, then the same prompt as 699 tokens and one decode step.
  std::unique_ptr<CudaRunner> r;
  std::unique_ptr<KvStore> store;
  const Status made = runner_on_store(*model, RunnerLimits{4096, 4, 512}, r, store);
  ASSERT_TRUE(made.ok()) << made.message();
  auto run_chunks = [&](const std::vector<int32_t>& toks, std::vector<int32_t> cuts) {
    auto a = store->add_sequence({});
    EXPECT_TRUE(a.ok());
    std::vector<float> lg;
    int32_t at = 0;
    for (int32_t cut : cuts) {
      const KvAppend app{a->seq, std::span(toks).subspan(at, cut - at)};
      EXPECT_TRUE(store->reserve(std::span<const KvAppend>(&app, 1))->fits());
      BatchEntry e;
      e.seq = a->seq;
      e.tokens = app.tokens;
      const Status st = r->run(std::span<const BatchEntry>(&e, 1), lg);
      EXPECT_TRUE(st.ok()) << st.message();
      at = cut;
    }
    EXPECT_TRUE(store->free_sequence(a->seq).ok());
    return lg;
  };
  const std::vector<float> logits = run_chunks(prompt, {512, 700});
  ASSERT_EQ(static_cast<int64_t>(logits.size()), V);
  EXPECT_EQ(argmax(logits), argmax(last));
  const float chunk_diff = rel_diff(last, logits);
  std::printf("GPU vs CPU logits, last of 700 prompt tokens: max |diff| / spread = %.4f\n",
              chunk_diff);
  EXPECT_LT(chunk_diff, 0.05f);  // bf16 weights and KV vs Q4_1 x Q8 and f16 KV
  const std::vector<float> step_logits = run_chunks(prompt, {512, 699, 700});
  const float step_diff = rel_diff(logits, step_logits);
  std::printf("GPU decode step vs GPU prefill chunk: max |diff| / spread = %.5f\n", step_diff);
  EXPECT_LT(step_diff, 0.01f);
  EXPECT_TRUE(store->check_invariants().ok());
}

TEST(CudaRunner, GreedyContinuationMatchesTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = model->tokenizer->encode(
      "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is", true,
      false);
  auto e = gpu_engine(model, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(gpu_greedy(*e, prompt, 6, nullptr), cpu_greedy(*model, prompt, 6, nullptr));
}

TEST(CudaRunner, TokenSelectDecodeRunsSparseAndMatchesTheCpuPipeline) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 2000);
  auto cfg = make_policy(
      "tokenselect", std::vector<std::string>{"top_k=256", "sinks=16", "local=64", "prefill=dense",
                                              "selection_cache=false"});
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  auto pol = std::make_shared<const PolicyConfig>(*cfg);
  auto e = gpu_engine(model, 2);
  ASSERT_TRUE(e);
  SparseStats ss;
  const auto got = gpu_greedy(*e, prompt, 8, pol, &ss);
  EXPECT_EQ(ss.selections, 7 * model->hp.n_layer);  // every decode step after the first token
  EXPECT_EQ(got, cpu_greedy(*model, prompt, 8, pol));
  // A generation that crosses the budget: dense decode steps, then sparse.
  const std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + 330);
  SparseStats cs;
  const auto crossing = gpu_greedy(*e, short_prompt, 16, pol, &cs);
  EXPECT_GT(cs.selections, 0);
  EXPECT_LT(cs.selections, 15 * model->hp.n_layer);
  EXPECT_EQ(crossing, cpu_greedy(*model, short_prompt, 16, pol));
  // The knob decides, not the preset name: a "dense" preset with tokenselect's knobs selects.
  auto renamed =
      make_policy("dense", std::vector<std::string>{"scorer=exact", "top_k=256", "sinks=16",
                                                    "local=64", "selection_cache=false"});
  ASSERT_TRUE(renamed.ok()) << renamed.message();
  SparseStats rs;
  EXPECT_EQ(gpu_greedy(*e, prompt, 8, std::make_shared<const PolicyConfig>(*renamed), &rs), got);
  EXPECT_EQ(rs.selections, 7 * model->hp.n_layer);
}

// The Selection Cache: theta = -1 reuses every layer's first selection, theta = 1 re-selects
// every step; both give the CPU pipeline's tokens with the same knobs, and hits are counted.
TEST(CudaRunner, TokenSelectSelectionCacheMatchesTheCpuPipeline) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 2000);
  const int32_t L = model->hp.n_layer;
  auto e = gpu_engine(model, 2);
  ASSERT_TRUE(e);
  for (const char* theta : {"theta=-1", "theta=1"}) {
    SCOPED_TRACE(theta);
    auto cfg = make_policy(
        "tokenselect",
        std::vector<std::string>{"top_k=256", "sinks=16", "local=64", "prefill=dense", theta});
    ASSERT_TRUE(cfg.ok()) << cfg.message();
    auto pol = std::make_shared<const PolicyConfig>(*cfg);
    SparseStats ss;
    const auto got = gpu_greedy(*e, prompt, 12, pol, &ss);
    EXPECT_EQ(ss.cache_lookups, 11 * L);
    std::printf("%s: %lld of %lld layer-steps reused their selection\n", theta,
                static_cast<long long>(ss.cache_hits), static_cast<long long>(ss.cache_lookups));
    EXPECT_EQ(ss.cache_hits, std::string(theta) == "theta=-1" ? 10 * L : 0);
    EXPECT_EQ(got, cpu_greedy(*model, prompt, 12, pol));
  }
}

TEST(CudaRunner, TokenSelectChunkPrefillMatchesTheCpuPipeline) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 2000);  // chunks 2-4 select
  auto cfg = make_policy(
      "tokenselect", std::vector<std::string>{"top_k=256", "sinks=16", "local=64", "prefill=chunk",
                                              "selection_cache=false"});
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  auto pol = std::make_shared<const PolicyConfig>(*cfg);
  auto e = gpu_engine(model, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(gpu_greedy(*e, prompt, 6, pol), cpu_greedy(*model, prompt, 6, pol));
}

// A batched step gives each sequence bit for bit the logits it gets alone (batch invariance):
// mixed prefill chunks and decode tokens of three sequences in one step, against each sequence
// in its own steps.
TEST(CudaRunner, BatchedStepsMatchEachSequenceAlone) {
  REQUIRE_GPU_AND_MODEL();
  std::unique_ptr<CudaRunner> r;
  std::unique_ptr<KvStore> store;
  const Status made = runner_on_store(*model, RunnerLimits{4096, 8, 1024}, r, store);
  ASSERT_TRUE(made.ok()) << made.message();
  const int64_t V = model->hp.n_vocab;
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t n : {333, 517, 190}) prompts.push_back(test_long_prompt(*model, n));
  // step k of sequence i appends cuts[i][k]..cuts[i][k+1]: prefill chunks, then one decode token
  const std::vector<std::vector<int32_t>> cuts = {
      {0, 300, 332, 333}, {0, 200, 516, 517}, {0, 189, 190, 190}};
  auto run = [&](const std::vector<int>& seqs, bool together) {
    std::vector<std::vector<float>> out(prompts.size());
    std::vector<KvSeqId> ids(prompts.size());
    for (int i : seqs) ids[i] = store->add_sequence({})->seq;
    for (size_t k = 0; k + 1 < cuts[0].size(); ++k) {
      std::vector<std::vector<int>> groups;
      if (together)
        groups.push_back(seqs);
      else
        for (int i : seqs) groups.push_back({i});
      for (const auto& g : groups) {
        std::vector<KvAppend> apps;
        std::vector<BatchEntry> batch;
        std::vector<int> who;
        for (int i : g) {
          if (cuts[i][k + 1] == cuts[i][k]) continue;
          apps.push_back(
              {ids[i], std::span(prompts[i]).subspan(cuts[i][k], cuts[i][k + 1] - cuts[i][k])});
          who.push_back(i);
        }
        if (apps.empty()) continue;
        EXPECT_TRUE(store->reserve(apps)->fits());
        for (const KvAppend& a : apps) batch.push_back({a.seq, a.tokens, false, nullptr});
        std::vector<float> lg;
        const Status st = r->run(batch, lg);
        EXPECT_TRUE(st.ok()) << st.message();
        for (size_t j = 0; j < who.size(); ++j)
          out[who[j]].assign(lg.begin() + j * V, lg.begin() + (j + 1) * V);
      }
    }
    for (int i : seqs) EXPECT_TRUE(store->free_sequence(ids[i]).ok());
    return out;
  };
  const auto alone = run({0, 1, 2}, false);
  const auto together = run({0, 1, 2}, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const float d = rel_diff(alone[i], together[i]);
    std::printf("sequence %zu: batched vs alone, last logits max |diff| / spread = %.5f\n", i, d);
    EXPECT_EQ(d, 0.f) << "sequence " << i << " (batch invariance: bit-equal logits)";
  }
  EXPECT_TRUE(store->check_invariants().ok());
}

// 8 concurrent greedy requests (mixed prefill and decode batches, dense and tokenselect) on one
// engine return the text each returns alone: the runner's products and attention splits do not
// depend on the rows beside a row (batch invariance, cuda_runner_matmul.cpp).
TEST(CudaRunner, ConcurrentGreedyRequestsAllFinish) {
  REQUIRE_GPU_AND_MODEL();
  auto ts = make_policy(
      "tokenselect", std::vector<std::string>{"top_k=256", "sinks=16", "local=64", "prefill=dense",
                                              "selection_cache=false"});
  ASSERT_TRUE(ts.ok());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<PolicyPtr> pols;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(test_long_prompt(*model, 300 + 230 * i));
    pols.push_back(i % 2 ? std::make_shared<const PolicyConfig>(*ts) : dense());
  }
  // one server: the requests one by one, then all at once
  auto many = gpu_engine(model, 8);
  ASSERT_TRUE(many);
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 8; ++i) want.push_back(gpu_greedy(*many, prompts[i], 12, pols[i]));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> got(8);
  int done = 0;
  for (int i = 0; i < 8; ++i) {
    RequestParams rp;
    rp.prompt = prompts[i];
    rp.max_tokens = 12;
    rp.stop_at_eog = false;
    rp.policy = pols[i];
    many->submit(std::move(rp), [&, i](const RequestEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (!ev.finished) {
        got[i].push_back(ev.token);
        return;
      }
      EXPECT_NE(ev.reason, FinishReason::error) << ev.error;
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == 8; }));
  int same = 0;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(got[i].size(), 12u) << "request " << i;
    same += got[i] == want[i] ? 1 : 0;
    EXPECT_EQ(got[i], want[i]) << "request " << i << " (batch invariance)";
  }
  std::printf("8 concurrent greedy requests: %d of 8 equal their one-by-one text\n", same);
  EXPECT_GT(many->stats().steps, 0);
}

// Prefix-cache hits and preemption on GPU pages: requests that share a prompt prefix reuse its
// pages, a pool too small for all of them at once preempts (and recomputes), and every request
// returns the text it returns alone on the same engine.
TEST(CudaRunner, PrefixHitsAndPreemptionKeepTheText) {
  REQUIRE_GPU_AND_MODEL();
  EngineConfig ec;
  ec.n_ctx = 1024;
  ec.max_running = 6;
  ec.max_batch_tokens = 256;
  ec.prefix_cache = true;
  ec.max_step_ms = 0;
  // room for about two of the six sequences at once
  ec.kv_budget_bytes = kv_budget_bytes(model->hp, 900, 2, ec.page_size);
  ec.runner_factory = cuda_runner_factory({0.5});
  auto made = Engine::create(model, ec);
  ASSERT_TRUE(made.ok()) << made.message();
  Engine& e = **made;
  const std::vector<int32_t> shared = test_long_prompt(*model, 512);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = shared;
    const std::vector<int32_t> tail = test_long_prompt(*model, 40 + 60 * i);
    p.insert(p.end(), tail.begin() + 1, tail.end());  // the tail without its BOS
    prompts.push_back(std::move(p));
  }
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(gpu_greedy(e, p, 48, dense()));
  const SchedulerStats alone = e.stats();
  EXPECT_GT(alone.cached_tokens, 0) << "the shared prefix was never reused";
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> got(prompts.size());
  size_t done = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams rp;
    rp.prompt = prompts[i];
    rp.max_tokens = 48;
    rp.stop_at_eog = false;
    rp.policy = dense();
    e.submit(std::move(rp), [&, i](const RequestEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) got[i].push_back(ev.token);
      if (!ev.finished) return;
      EXPECT_NE(ev.reason, FinishReason::error) << ev.error;
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(
        cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == prompts.size(); }));
  }
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(10)));
  const SchedulerStats all = e.stats();
  std::printf("prefix hits %lld tokens alone, %lld together; %lld preemptions together\n",
              static_cast<long long>(alone.cached_tokens),
              static_cast<long long>(all.cached_tokens - alone.cached_tokens),
              static_cast<long long>(all.preemptions - alone.preemptions));
  EXPECT_GT(all.preemptions, alone.preemptions) << "the pool never ran out";
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << "request " << i << " (recompute and batch invariance)";
  EXPECT_EQ(e.kv_stats().n_pages_used, 0);
}

// Qwen2.5-Coder-0.5B under YaRN x4 over 32768 (what `--rope-scaling yarn --rope-scale 4
// --yarn-orig-ctx 32768` sets), loaded once; nullptr when the file is absent.
std::shared_ptr<const Model> test_qwen_yarn() {
  static std::shared_ptr<const Model> m = []() -> std::shared_ptr<const Model> {
    const std::string path = test_model_path("qwen2.5-coder-0.5b.gguf");
    if (path.empty()) return nullptr;
    auto r = load_model(path);
    if (!r) return nullptr;
    RopeScaling s;
    s.type = RopeScalingType::yarn;
    s.factor = 4.0f;
    s.n_ctx_orig = 32768;
    s.ext_factor = 1.0f;
    if (!set_rope_scaling((*r)->hp, s).ok()) return nullptr;
    return std::shared_ptr<const Model>(std::move(r.value()));
  }();
  return m;
}

// YaRN on the GPU: the runner rotates by the host's per-pair frequencies and attends with the
// model's attention scale (mscale^2 folded in), so a prompt over four prefill chunks, a decode
// step and a greedy continuation match the CPU's YaRN forward.
TEST(CudaRunner, QwenYarnLogitsAndGreedyMatchTheCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  auto model = test_qwen_yarn();
  if (!model) GTEST_SKIP() << "qwen2.5-coder-0.5b.gguf not found (sieve pull qwen2.5-coder-0.5b)";
  ASSERT_TRUE(model->hp.rope_scaling.active());
  const std::vector<int32_t> prompt = test_long_prompt(*model, 1800);  // chunks 512 x 3 + 264
  ThreadPool pool(8);
  auto ref = prompt_logits(*model, pool, prompt, 512);
  ASSERT_TRUE(ref.ok()) << ref.message();
  const int64_t V = model->hp.n_vocab;
  const std::vector<float> last(ref->end() - V, ref->end());

  std::unique_ptr<CudaRunner> r;
  std::unique_ptr<KvStore> store;
  const Status made = runner_on_store(*model, RunnerLimits{4096, 4, 512}, r, store);
  ASSERT_TRUE(made.ok()) << made.message();
  auto run_chunks = [&](std::vector<int32_t> cuts) {
    auto a = store->add_sequence({});
    EXPECT_TRUE(a.ok());
    std::vector<float> lg;
    int32_t at = 0;
    for (int32_t cut : cuts) {
      const KvAppend app{a->seq, std::span(prompt).subspan(at, cut - at)};
      EXPECT_TRUE(store->reserve(std::span<const KvAppend>(&app, 1))->fits());
      BatchEntry e;
      e.seq = a->seq;
      e.tokens = app.tokens;
      const Status st = r->run(std::span<const BatchEntry>(&e, 1), lg);
      EXPECT_TRUE(st.ok()) << st.message();
      at = cut;
    }
    EXPECT_TRUE(store->free_sequence(a->seq).ok());
    return lg;
  };
  const std::vector<float> logits = run_chunks({512, 1024, 1536, 1800});
  ASSERT_EQ(static_cast<int64_t>(logits.size()), V);
  EXPECT_EQ(argmax(logits), argmax(last));
  const float d = rel_diff(last, logits);
  std::printf("Qwen YaRN x4, GPU vs CPU logits, last of 1800 prompt tokens: %.4f\n", d);
  EXPECT_LT(d, 0.05f);
  const float step = rel_diff(logits, run_chunks({512, 1024, 1536, 1799, 1800}));
  std::printf("Qwen YaRN x4, GPU decode step vs GPU prefill chunk: %.5f\n", step);
  EXPECT_LT(step, 0.01f);
  r.reset();

  const std::vector<int32_t> code = model->tokenizer->encode(
      "# Python: the n-th Fibonacci number\ndef fibonacci(n):\n", true, false);
  auto e = gpu_engine(model, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(gpu_greedy(*e, code, 12, nullptr), cpu_greedy(*model, code, 12, nullptr));
  std::vector<int32_t> tail(prompt.begin(), prompt.begin() + 1200);
  EXPECT_EQ(gpu_greedy(*e, tail, 8, nullptr), cpu_greedy(*model, tail, 8, nullptr));
}

// What the GPU cannot run is refused by knob value, naming the knob and the backend.
TEST(CudaRunner, UnsupportedKnobIsOneErrorNamingIt) {
  auto h2o = make_policy("h2o");
  ASSERT_TRUE(h2o.ok());
  auto g = gpu_policy_from(*h2o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("memory=h2o"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("CUDA backend"), std::string::npos) << g.message();
  auto grp = make_policy("tokenselect", std::vector<std::string>{"scope=group"});
  ASSERT_TRUE(grp.ok());
  auto bad = gpu_policy_from(*grp);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("selection_cache=false"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace sieve

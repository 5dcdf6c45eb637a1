// The GPU forward pass against the CPU reference on SmolLM2: logits of a prompt that spans
// two prefill chunks, greedy continuations, and TokenSelect decode (the sparse path really
// runs, and matches the CPU pipeline's tokenselect with the same knobs). Skips without a
// CUDA device or without the model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/thread_pool.h"
#include "engine/engine_test_util.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "gpu/gpu_session.h"

namespace sieve {
namespace {

#define REQUIRE_GPU_AND_MODEL()                                        \
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device";              \
  auto model = test_smollm2();                                         \
  if (!model) GTEST_SKIP() << "SmolLM2 test model not found";

// Largest logit difference relative to the spread of the reference logits.
float rel_diff(const std::vector<float>& ref, const std::vector<float>& got) {
  float lo = ref[0], hi = ref[0];
  for (float x : ref) lo = std::min(lo, x), hi = std::max(hi, x);
  return max_abs_diff(ref, got) / (hi - lo);
}

// CPU greedy continuation under a policy (nullptr: dense).
std::vector<int32_t> cpu_greedy(const Model& m, const std::vector<int32_t>& prompt, int n, PolicyPtr policy) {
  ThreadPool pool(2);
  Generator gen(m, pool, 4096);
  GenerateOptions g;
  g.n_predict = n;
  g.sampling.temperature = 0;
  g.stop_at_eog = false;
  g.policy = std::move(policy);
  std::vector<int32_t> out;
  auto r = gen.generate(prompt, g, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.message();
  return out;
}

std::vector<int32_t> gpu_greedy(GpuSession& s, const std::vector<int32_t>& prompt, int n) {
  s.reset();
  std::vector<float> logits;
  EXPECT_TRUE(s.prefill(prompt, logits).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = argmax(logits);
    out.push_back(t);
    const int32_t one[1] = {t};
    if (i + 1 < n) {
      const Status st = s.step(one, logits);
      EXPECT_TRUE(st.ok()) << st.message();
    }
  }
  return out;
}

TEST(GpuSession, DenseLogitsMatchTheCpuAcrossChunks) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 700);  // chunks of 512 + 188
  ThreadPool pool(2);
  Generator gen(*model, pool, 4096);
  auto ref = gen.prompt_logits(prompt, 512);
  ASSERT_TRUE(ref.ok()) << ref.message();
  const int64_t V = model->hp.n_vocab;
  const std::vector<float> last(ref->end() - V, ref->end());

  auto s = GpuSession::create(*model, 4096, GpuPolicy{});
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<float> logits;
  ASSERT_TRUE((*s)->prefill(prompt, logits).ok());
  ASSERT_EQ(static_cast<int64_t>(logits.size()), V);
  EXPECT_EQ(argmax(logits), argmax(last));
  const float chunk_diff = rel_diff(last, logits);
  std::printf("GPU vs CPU logits, last of 700 prompt tokens: max |diff| / spread = %.4f\n", chunk_diff);
  EXPECT_LT(chunk_diff, 0.05f);  // bf16 weights and KV vs Q4_1 x Q8 and f16 KV

  // one token at a time gives the same logits as the chunk (the decode kernel vs prefill)
  (*s)->reset();
  std::vector<float> step_logits;
  ASSERT_TRUE((*s)->prefill(std::span(prompt).first(699), step_logits).ok());
  ASSERT_TRUE((*s)->step(std::span(prompt).subspan(699), step_logits).ok());
  const float step_diff = rel_diff(logits, step_logits);
  std::printf("GPU decode step vs GPU prefill chunk: max |diff| / spread = %.5f\n", step_diff);
  EXPECT_LT(step_diff, 0.01f);
  EXPECT_EQ((*s)->n_tokens(), 700);
}

// SIEVE_GPU_PREFILL picks the dense prefill kernel: cuDNN's fused attention gives the logits our
// kernel gives (three chunks: the padding mask and the bottom-right causal mask at work).
TEST(GpuSession, CudnnPrefillMatchesOurKernel) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 1100);
  std::vector<float> ours, theirs;
  setenv("SIEVE_GPU_PREFILL", "sieve", 1);
  {
    auto s = GpuSession::create(*model, 4096, GpuPolicy{});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ((*s)->prefill_kernel().rfind("sieve", 0), 0u) << (*s)->prefill_kernel();
    ASSERT_TRUE((*s)->prefill(prompt, ours).ok());
  }
  setenv("SIEVE_GPU_PREFILL", "cudnn", 1);
  auto s = GpuSession::create(*model, 4096, GpuPolicy{});
  unsetenv("SIEVE_GPU_PREFILL");
  if (!s && s.message().find("cuDNN") != std::string::npos) GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ((*s)->prefill_kernel().rfind("cuDNN", 0), 0u) << (*s)->prefill_kernel();
  ASSERT_TRUE((*s)->prefill(prompt, theirs).ok());
  const float diff = rel_diff(ours, theirs);
  std::printf("cuDNN vs sieve prefill kernel, last of 1100 prompt tokens: max |diff| / spread = %.5f\n", diff);
  EXPECT_LT(diff, 0.01f);
  EXPECT_EQ(argmax(ours), argmax(theirs));
  // a bad value is one clear error
  setenv("SIEVE_GPU_PREFILL", "fast", 1);
  auto bad = GpuSession::create(*model, 4096, GpuPolicy{});
  unsetenv("SIEVE_GPU_PREFILL");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("use auto (time both), sieve or cudnn"), std::string::npos) << bad.message();
  // auto times both and names its choice
  auto a = GpuSession::create(*model, 4096, GpuPolicy{});
  ASSERT_TRUE(a.ok()) << a.message();
  std::printf("SIEVE_GPU_PREFILL=auto on SmolLM2, 4096 context: %s\n", (*a)->prefill_kernel().c_str());
  EXPECT_NE((*a)->prefill_kernel().find("us"), std::string::npos) << (*a)->prefill_kernel();
}

TEST(GpuSession, GreedyContinuationMatchesTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = model->tokenizer->encode(
      "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is", true, false);
  auto s = GpuSession::create(*model, 1024, GpuPolicy{});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(gpu_greedy(**s, prompt, 6), cpu_greedy(*model, prompt, 6, nullptr));
}

TEST(GpuSession, TokenSelectDecodeRunsSparseAndMatchesTheCpuPipeline) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 2000);
  auto cfg = make_policy("tokenselect", std::vector<std::string>{"top_k=256", "sinks=16", "local=64",
                                                                  "prefill=dense", "selection_cache=false"});
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  auto gp = gpu_policy_from(*cfg);
  ASSERT_TRUE(gp.ok()) << gp.message();
  auto sparse = GpuSession::create(*model, 4096, *gp);
  ASSERT_TRUE(sparse.ok()) << sparse.message();
  auto dense = GpuSession::create(*model, 4096, GpuPolicy{});
  ASSERT_TRUE(dense.ok());
  const auto got = gpu_greedy(**sparse, prompt, 8);
  EXPECT_EQ((*sparse)->stats().sparse_layer_steps, 7 * model->hp.n_layer);
  EXPECT_LT((*sparse)->stats().fraction_read(), 0.2);
  EXPECT_EQ((*dense)->stats().sparse_layer_steps, 0);
  // the sparse decode step differs from dense (it read 337 of ~2000 keys) ...
  std::vector<float> ld, ls;
  (*sparse)->reset();
  (*dense)->reset();
  ASSERT_TRUE((*sparse)->prefill(prompt, ls).ok());
  ASSERT_TRUE((*dense)->prefill(prompt, ld).ok());
  const int32_t one[1] = {argmax(ld)};
  ASSERT_TRUE((*sparse)->step(one, ls).ok());
  ASSERT_TRUE((*dense)->step(one, ld).ok());
  EXPECT_GT(max_abs_diff(ld, ls), 0.0f);
  // ... and gives the CPU tokenselect pipeline's tokens with the same knobs
  EXPECT_EQ(got, cpu_greedy(*model, prompt, 8, std::make_shared<const PolicyConfig>(*cfg)));

  // A generation that crosses the budget: dense decode steps (one graph), then sparse (the other).
  const std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + 330);
  const auto crossing = gpu_greedy(**sparse, short_prompt, 16);
  EXPECT_GT((*sparse)->stats().dense_layer_steps, 0);
  EXPECT_GT((*sparse)->stats().sparse_layer_steps, 0);
  EXPECT_EQ(crossing, cpu_greedy(*model, short_prompt, 16, std::make_shared<const PolicyConfig>(*cfg)));
}

// The Selection Cache on the GPU: theta = -1 reuses every layer's first selection (plus the
// tokens that leave the window), theta = 1 re-selects every step (no query repeats exactly);
// both give the CPU pipeline's tokens with the same knobs, and the hits are counted.
TEST(GpuSession, TokenSelectSelectionCacheMatchesTheCpuPipeline) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 2000);
  const int32_t L = model->hp.n_layer;
  for (const char* theta : {"theta=-1", "theta=1", "theta=0.9"}) {
    SCOPED_TRACE(theta);
    auto cfg = make_policy("tokenselect", std::vector<std::string>{"top_k=256", "sinks=16", "local=64",
                                                                    "prefill=dense", theta});
    ASSERT_TRUE(cfg.ok()) << cfg.message();
    auto gp = gpu_policy_from(*cfg);
    ASSERT_TRUE(gp.ok()) << gp.message();
    EXPECT_TRUE(gp->selection_cache);
    auto s = GpuSession::create(*model, 4096, *gp);
    ASSERT_TRUE(s.ok()) << s.message();
    const auto got = gpu_greedy(**s, prompt, 12);
    const GpuStats& st = (*s)->stats();
    EXPECT_EQ(st.cache_lookups, 11 * L);
    std::printf("%s: %lld of %lld layer-steps reused their selection\n", theta,
                static_cast<long long>(st.cache_hits), static_cast<long long>(st.cache_lookups));
    if (std::string(theta) == "theta=-1") {
      EXPECT_EQ(st.cache_hits, 10 * L);  // all but the first step
    }
    if (std::string(theta) == "theta=1") {
      EXPECT_EQ(st.cache_hits, 0);
    }
    if (std::string(theta) != "theta=0.9") {  // 0.9 may flip a hit near the threshold
      EXPECT_EQ(got, cpu_greedy(*model, prompt, 12, std::make_shared<const PolicyConfig>(*cfg)));
    }
    // a new sequence starts without fingerprints
    (void)gpu_greedy(**s, prompt, 3);
    EXPECT_EQ((*s)->stats().cache_lookups, 2 * L);
    if (std::string(theta) == "theta=-1") {
      EXPECT_EQ((*s)->stats().cache_hits, L);
    }
  }
  // scope=group keeps one selection per KV head: the cache runs with scope=layer only here
  auto group = make_policy("tokenselect", std::vector<std::string>{"scope=group"});
  ASSERT_TRUE(group.ok());
  auto bad = gpu_policy_from(*group);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("selection_cache=false"), std::string::npos) << bad.message();
}

TEST(GpuSession, TokenSelectChunkPrefillMatchesTheCpuPipeline) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<int32_t> prompt = test_long_prompt(*model, 2000);  // chunks 2-4 select
  auto cfg = make_policy("tokenselect", std::vector<std::string>{"top_k=256", "sinks=16", "local=64",
                                                                  "prefill=chunk", "selection_cache=false"});
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  auto gp = gpu_policy_from(*cfg);
  ASSERT_TRUE(gp.ok()) << gp.message();
  EXPECT_TRUE(gp->chunk_prefill);
  auto s = GpuSession::create(*model, 4096, *gp);
  ASSERT_TRUE(s.ok()) << s.message();
  const auto got = gpu_greedy(**s, prompt, 8);
  EXPECT_EQ((*s)->stats().prefill_selections, 3 * model->hp.n_layer);
  EXPECT_EQ(got, cpu_greedy(*model, prompt, 8, std::make_shared<const PolicyConfig>(*cfg)));
  // the sparse chunks change the prompt's logits (they read ~850 of up to 2000 keys)
  auto dense_cfg = make_policy("tokenselect", std::vector<std::string>{"top_k=256", "sinks=16", "local=64",
                                                                        "prefill=dense", "selection_cache=false"});
  auto d = GpuSession::create(*model, 4096, *gpu_policy_from(*dense_cfg));
  ASSERT_TRUE(d.ok());
  std::vector<float> la, lb;
  (*s)->reset();
  ASSERT_TRUE((*s)->prefill(prompt, la).ok());
  ASSERT_TRUE((*d)->prefill(prompt, lb).ok());
  EXPECT_GT(max_abs_diff(la, lb), 0.0f);
  // prefill_tail: chunks reaching into the last 600 tokens (those ending at 1536 and 2000) run
  // densely, the CPU's rule; only the chunk ending at 1024 selects.
  ASSERT_TRUE(set_policy_knob(*cfg, "prefill_tail=600").ok());
  auto t = GpuSession::create(*model, 4096, *gpu_policy_from(*cfg));
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(gpu_greedy(**t, prompt, 8), cpu_greedy(*model, prompt, 8, std::make_shared<const PolicyConfig>(*cfg)));
  EXPECT_EQ((*t)->stats().prefill_selections, 1 * model->hp.n_layer);
  // chunk_from (auto's 64K on the GPU): a shorter prompt prefills densely
  GpuPolicy from = *gpu_policy_from(*cfg);
  from.chunk_from = 4096;
  auto f = GpuSession::create(*model, 4096, from);
  ASSERT_TRUE(f.ok()) << f.message();
  std::vector<float> lf;
  ASSERT_TRUE((*f)->prefill(prompt, lf).ok());
  EXPECT_EQ((*f)->stats().prefill_selections, 0);
}

// Gemma 3 (sliding-window layers of 512 tokens, one global layer in six, QK norms, post-norms,
// GeGLU): a 2500-token prompt crosses the window several times, and the sliding layers' ring
// of 65 pages (1040 tokens) wraps twice.
TEST(GpuSession, Gemma3SlidingWindowLayersMatchTheCpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  auto model = test_gemma3();
  if (!model) GTEST_SKIP() << "Gemma 3 test model not found";
  const int32_t n = 2500;
  const std::vector<int32_t> prompt = test_long_prompt(*model, n);
  auto s = GpuSession::create(*model, 4096, GpuPolicy{});
  ASSERT_TRUE(s.ok()) << s.message();
  // the decode kernel's window equals the prefill kernel's per-query window
  std::vector<float> chunk, step;
  ASSERT_TRUE((*s)->prefill(prompt, chunk).ok());
  // K/V held: every token in the full layers, the ring in the sliding ones
  const ModelHParams& hp = model->hp;
  int64_t full = 0;
  for (LayerKind k : hp.layer_kind) full += k == LayerKind::full ? 1 : 0;
  const int64_t per_tok_layer = int64_t{hp.kv_dim()} * 2 * 2;
  EXPECT_EQ((*s)->kv_bytes(), per_tok_layer * (full * n + (hp.n_layer - full) * 1040));
  EXPECT_EQ((*s)->kv_bytes_per_token(), per_tok_layer * full);
  (*s)->reset();
  ASSERT_TRUE((*s)->prefill(std::span(prompt).first(n - 1), step).ok());
  ASSERT_TRUE((*s)->step(std::span(prompt).subspan(n - 1), step).ok());
  const float d = rel_diff(chunk, step);
  std::printf("Gemma 3 GPU decode step vs prefill chunk: max |diff| / spread = %.5f\n", d);
  EXPECT_LT(d, 0.01f);
  EXPECT_EQ(gpu_greedy(**s, prompt, 6), cpu_greedy(*model, prompt, 6, nullptr));
}

// Bug: sieve eval reused one GPU session for tokenselect and tokenselect:prefill=dense because
// the runner compared only some fields of the policy. Every knob the GPU path runs counts.
TEST(GpuPolicy, PoliciesThatDifferInAnyKnobAreDifferent) {
  const std::vector<std::vector<std::string>> variants = {
      {}, {"prefill=dense"}, {"top_k=100"}, {"sinks=4"}, {"local=32"}, {"scope=group", "selection_cache=false"},
      {"prefill_tail=512"}, {"selection_cache=false"}, {"theta=0.5"}};
  std::vector<GpuPolicy> made;
  for (const auto& v : variants) {
    auto cfg = make_policy("tokenselect", v);
    ASSERT_TRUE(cfg.ok()) << cfg.message();
    auto gp = gpu_policy_from(*cfg);
    ASSERT_TRUE(gp.ok()) << gp.message();
    made.push_back(*gp);
  }
  for (size_t i = 0; i < made.size(); ++i) {
    for (size_t j = 0; j < made.size(); ++j) EXPECT_EQ(made[i] == made[j], i == j) << i << " vs " << j;
  }
  EXPECT_FALSE(made[0] == GpuPolicy{});
}

// auto prefills in selecting chunks on the CPU; the GPU runs it with a dense prefill (faster
// there) and names it so.
TEST(GpuPolicy, AutoPrefillsDenselyOnTheGpuBelow64K) {
  const PolicyConfig r = resolve_auto(*make_policy("auto"), 100000);
  ASSERT_EQ(r.prefill, PrefillMode::chunk);
  auto gp = gpu_policy_from(r);
  ASSERT_TRUE(gp.ok()) << gp.message();
  EXPECT_TRUE(gp->sparse);
  EXPECT_TRUE(gp->chunk_prefill);
  EXPECT_EQ(gp->prefill_tail, 1024);
  EXPECT_EQ(gp->chunk_from, 65536);
  EXPECT_TRUE(gp->selection_cache);
  EXPECT_FLOAT_EQ(gp->theta, 0.7f);
  EXPECT_EQ(gp->name, "tokenselect prefill_tail=1024 theta=0.7 (dense prefill below 65536 prompt tokens)");
  auto ts = gpu_policy_from(*make_policy("tokenselect", std::vector<std::string>{"prefill_tail=1024"}));
  ASSERT_TRUE(ts.ok());
  EXPECT_TRUE(ts->chunk_prefill);
  EXPECT_EQ(ts->prefill_tail, 1024);
  // Pre-RoPE scores are a CPU feature: asked for outright they are refused with the way out
  // (auto's score_positions=auto only acts under compact positions, which the GPU refuses).
  auto pre = gpu_policy_from(*make_policy("tokenselect", std::vector<std::string>{"score_positions=none"}));
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.message().find("--backend cpu"), std::string::npos) << pre.message();
}

TEST(GpuSession, BadInputIsAnError) {
  REQUIRE_GPU_AND_MODEL();
  auto s = GpuSession::create(*model, 64, GpuPolicy{});
  ASSERT_TRUE(s.ok());
  std::vector<float> logits;
  const std::vector<int32_t> too_long(65, 1);
  const Status st = (*s)->prefill(too_long, logits);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--ctx-size"), std::string::npos);
  const int32_t bad[1] = {model->hp.n_vocab};
  EXPECT_FALSE((*s)->step(bad, logits).ok());
  EXPECT_EQ((*s)->n_tokens(), 0);

  // TokenSelect past the trained context: positions=auto means compact positions on the CPU,
  // which the GPU lacks - an error naming the way out; positions=original runs
  const int32_t train = model->hp.n_ctx_train;
  const std::vector<int32_t> past(train + 1, 100);
  auto ts = make_policy("tokenselect");
  ASSERT_TRUE(ts.ok());
  auto gs = GpuSession::create(*model, train + 8, *gpu_policy_from(*ts));
  ASSERT_TRUE(gs.ok()) << gs.message();
  const Status past_st = (*gs)->prefill(past, logits);
  ASSERT_FALSE(past_st.ok());
  EXPECT_NE(past_st.message().find("positions=original"), std::string::npos) << past_st.message();
  auto orig = make_policy("tokenselect", std::vector<std::string>{"positions=original"});
  ASSERT_TRUE(orig.ok());
  auto go = GpuSession::create(*model, train + 8, *gpu_policy_from(*orig));
  ASSERT_TRUE(go.ok());
  EXPECT_TRUE((*go)->prefill(past, logits).ok());
  auto h2o = make_policy("h2o");
  ASSERT_TRUE(h2o.ok());
  EXPECT_FALSE(gpu_policy_from(*h2o).ok());
}

}  // namespace
}  // namespace sieve

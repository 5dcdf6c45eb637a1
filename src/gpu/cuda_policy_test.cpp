// The sparse policies the CUDA runner runs besides TokenSelect's defaults, each against the CPU
// reference on SmolLM2 with the same knobs: StreamingLLM (scorer=none, with and without the
// selection cache), min_context, top-p with a floor, max-pooled scores, raw logits, the raw sum
// per KV head, the hard vote, sketch keys (the JL projection and a PCA basis, decode and chunk
// prefill), and Quest's block bounds (per KV head and per layer). Each policy runs twice: through
// the engine one request at a time (greedy tokens equal the CPU's), and through the runner with
// three selecting sequences and a dense one in the same steps (prefill chunks beside decode
// tokens), teacher-forced with the CPU's tokens: after every step each sequence's top logit is the
// CPU's next token. Skips without a CUDA device or without the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/engine_test_util.h"
#include "engine/kv_binding.h"
#include "engine/sampler.h"
#include "engine/sparse_seq.h"
#include "gpu/cuda_runner.h"
#include "sparse/sketch_basis.h"

namespace sieve {
namespace {

#define REQUIRE_GPU_AND_MODEL()                           \
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device"; \
  auto model = test_smollm2();                            \
  if (!model) GTEST_SKIP() << "SmolLM2 test model not found";

PolicyPtr policy(std::string_view preset, std::vector<std::string> knobs) {
  auto p = make_policy(preset, knobs);
  EXPECT_TRUE(p.ok()) << p.message();
  return p ? std::make_shared<const PolicyConfig>(*p) : nullptr;
}

// CPU greedy continuation under a policy, computed once per (policy, prompt) in this process:
// the engine check and the batched check of a policy compare with the same references.
std::vector<int32_t> cpu_greedy(const Model& m, const std::vector<int32_t>& prompt, int n,
                                PolicyPtr pol) {
  static std::map<std::string, std::vector<int32_t>> memo;
  const std::string key =
      fmt::format("{}|{}|{}|{}", pol->describe(), prompt.size(), prompt.back(), n);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  auto r =
      cpu_greedy_tokens(m, prompt, n, std::move(pol),
                        static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 16u)));
  EXPECT_TRUE(r.ok()) << r.message();
  const std::vector<int32_t> out = r ? *r : std::vector<int32_t>{};
  memo[key] = out;
  return out;
}

// The engine on the CUDA runner with `def` as its default policy (its sketch keys are the ones
// the store keeps); no prefix cache.
std::unique_ptr<Engine> gpu_engine(std::shared_ptr<const Model> m, PolicyPtr def) {
  EngineConfig ec;
  ec.n_ctx = 4096;
  ec.max_running = 2;
  ec.max_batch_tokens = 512;
  ec.prefix_cache = false;
  ec.max_step_ms = 0;
  ec.default_policy = std::move(def);
  ec.runner_factory = cuda_runner_factory({0.5});
  auto e = Engine::create(std::move(m), ec);
  EXPECT_TRUE(e.ok()) << e.message();
  return e ? std::move(e.value()) : nullptr;
}

std::vector<int32_t> gpu_greedy(Engine& e, const std::vector<int32_t>& prompt, int n, PolicyPtr pol,
                                SparseStats* stats) {
  auto r = greedy_tokens_on(e, prompt, n, std::move(pol), stats);
  EXPECT_TRUE(r.ok()) << r.message();
  return r ? *r : std::vector<int32_t>{};
}

constexpr int k_new = 8;  // tokens generated per check

// One request at a time through the engine: the CPU's greedy tokens; the policy selected.
void expect_engine_matches_cpu(std::shared_ptr<const Model> model, PolicyPtr pol, bool ranks) {
  auto e = gpu_engine(model, pol);
  ASSERT_TRUE(e);
  for (int n : {2000, 1300}) {
    SCOPED_TRACE(n);
    const std::vector<int32_t> prompt = test_long_prompt(*model, n);
    SparseStats ss;
    const auto got = gpu_greedy(*e, prompt, k_new, pol, &ss);
    EXPECT_EQ(got, cpu_greedy(*model, prompt, k_new, pol));
    EXPECT_GT(ss.layer_steps, 0);
    if (ranks) {
      EXPECT_GT(ss.selections, 0);
    }
    EXPECT_LT(ss.selected_tokens, ss.context_tokens);  // fewer tokens read than dense
  }
}

// Three sequences of `pol` (prompts of 2000, 1300 and 700 tokens) and a dense one of 900 in the
// same runner steps: 512-token prefill chunks, then one token per step, each step's input the
// CPU's greedy token, so a sequence's top logit after every step is checked against the CPU's
// next token without one difference changing what follows.
void expect_batched_steps_match_cpu(const Model& m, PolicyPtr pol) {
  const SketchSpec sk = sketch_spec_for(*pol, m.hp);
  std::unique_ptr<CudaRunner> r;
  {
    auto cr = CudaRunner::create(m, RunnerLimits{4096, 8, 2048}, {0.5});
    ASSERT_TRUE(cr.ok()) << cr.message();
    r = std::move(cr.value());
  }
  KvConfig kc = kv_config_for(m.hp, int64_t{256} << 20, 16, "test");
  kc.host_rows = false;
  kc.prefix_cache = false;
  kc.sketch_dim = sk.dim;
  auto made = KvStore::create(kc);
  ASSERT_TRUE(made.ok()) << made.message();
  KvStore store = std::move(made.value());
  ASSERT_TRUE(r->attach(store).ok());
  struct Seq {
    std::vector<int32_t> prompt, want;
    std::unique_ptr<SparseSeq> sp;
    KvSeqId id = 0;
    size_t at = 0;    // prompt tokens appended
    int checked = 0;  // CPU tokens compared
  };
  std::vector<Seq> seqs;
  for (int n : {2000, 1300, 700, 900}) {
    Seq s;
    s.prompt = test_long_prompt(m, n);
    const PolicyPtr p =
        n == 900 ? std::make_shared<const PolicyConfig>(*make_policy("dense")) : pol;
    s.want = cpu_greedy(m, s.prompt, k_new, p);
    if (n != 900) {
      s.sp = std::make_unique<SparseSeq>(*pol, m.hp);
      s.sp->prompt_tokens = n;
    }
    s.id = store.add_sequence({})->seq;
    seqs.push_back(std::move(s));
  }
  const int64_t V = m.hp.n_vocab;
  int mismatches = 0;
  for (int step = 0;; ++step) {
    std::vector<KvAppend> apps;
    std::vector<Seq*> who;
    for (Seq& s : seqs) {
      if (s.at < s.prompt.size()) {
        const size_t n = std::min<size_t>(512, s.prompt.size() - s.at);
        apps.push_back({s.id, std::span<const int32_t>(s.prompt).subspan(s.at, n)});
        s.at += n;
      } else if (s.checked < k_new) {
        apps.push_back({s.id, std::span<const int32_t>(s.want).subspan(s.checked - 1, 1)});
      } else {
        continue;
      }
      who.push_back(&s);
    }
    if (apps.empty()) break;
    ASSERT_TRUE(store.reserve(apps)->fits());
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < apps.size(); ++i)
      batch.push_back({apps[i].seq, apps[i].tokens, false, who[i]->sp.get()});
    std::vector<float> lg;
    const Status st = r->run(batch, lg);
    ASSERT_TRUE(st.ok()) << st.message();
    for (size_t i = 0; i < who.size(); ++i) {
      Seq& s = *who[i];
      if (s.at < s.prompt.size()) continue;  // a prefill chunk before the last
      const std::vector<float> row(lg.begin() + i * V, lg.begin() + (i + 1) * V);
      const int32_t top = argmax(row);
      if (top != s.want[s.checked]) {
        ++mismatches;
        ADD_FAILURE() << "prompt of " << s.prompt.size() << " tokens, token " << s.checked
                      << ": GPU " << top << ", CPU " << s.want[s.checked] << " (step " << step
                      << ")";
      }
      ++s.checked;
    }
  }
  for (Seq& s : seqs) {
    EXPECT_EQ(s.checked, k_new);
    if (s.sp) {
      EXPECT_GT(s.sp->stats.layer_steps, 0);
    }
    EXPECT_TRUE(store.free_sequence(s.id).ok());
  }
  std::printf("%s: batched steps, %d of %d tokens differ from the CPU's\n", pol->describe().c_str(),
              mismatches, 4 * k_new);
  EXPECT_TRUE(store.check_invariants().ok());
}

void expect_matches_cpu(std::shared_ptr<const Model> model, PolicyPtr pol, bool ranks = true) {
  ASSERT_TRUE(pol);
  SCOPED_TRACE(pol->describe());
  const auto g = gpu_policy_from(*pol, &model->hp);
  ASSERT_TRUE(g.ok()) << g.message();
  expect_engine_matches_cpu(model, pol, ranks);
  expect_batched_steps_match_cpu(*model, pol);
}

TEST(CudaPolicy, StreamingReadsSinksAndWindowAsTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  // threshold = sinks + local = 272: every decode step of these prompts reads sinks + window
  expect_matches_cpu(model, policy("streaming", {"sinks=16", "local=256", "selection_cache=false"}),
                     false);
  // theta -1: each layer keeps its first (empty) pick list and reads the tokens that left the
  // window since, as the CPU's cache does
  expect_matches_cpu(model, policy("streaming", {"sinks=16", "local=256", "theta=-1"}), false);
}

TEST(CudaPolicy, MinContextAndTopPMatchTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  const std::vector<std::string> base = {"sinks=16", "local=64", "prefill=dense"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return policy("tokenselect", more);
  };
  // selection from 1000 context tokens on (sinks + top_k + local would be 336): the 700-token
  // prompt stays dense
  expect_matches_cpu(model, with({"top_k=256", "min_context=1000", "selection_cache=false"}));
  // the smallest set holding half the soft vote's mass, at least 32 and at most 1024 tokens
  expect_matches_cpu(model,
                     with({"top_k=1024", "top_p=0.5", "min_keep=32", "selection_cache=false"}));
  // the same through the selection cache (every layer reuses its first selection)
  expect_matches_cpu(model, with({"top_k=1024", "top_p=0.5", "min_keep=32", "theta=-1"}));
}

TEST(CudaPolicy, PooledRawAndGroupScoresMatchTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  expect_matches_cpu(
      model, policy("tokenselect", {"top_k=256", "sinks=16", "local=64", "prefill=dense",
                                    "pool_kernel=5", "raw_logits=true", "selection_cache=false"}));
  expect_matches_cpu(model, policy("tokenselect", {"top_k=256", "sinks=16", "local=64",
                                                   "prefill=dense", "aggregation=raw_sum",
                                                   "scope=group", "selection_cache=false"}));
  expect_matches_cpu(
      model, policy("tokenselect", {"top_k=256", "sinks=16", "local=64", "prefill=chunk",
                                    "scope=group", "pool_kernel=4", "selection_cache=false"}));
}

TEST(CudaPolicy, BlockGranularityMatchesTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  // the top 16 blocks of 16 tokens from the range's start (through the cache: theta -1)
  expect_matches_cpu(model, policy("tokenselect", {"top_k=256", "sinks=16", "local=64",
                                                   "prefill=dense", "block=16", "theta=-1"}));
  // top-p over blocks of 24 per KV head, at least 40 tokens (2 blocks), chunk prefill
  expect_matches_cpu(
      model,
      policy("tokenselect", {"top_k=1024", "top_p=0.5", "min_keep=40", "sinks=16", "local=64",
                             "prefill=chunk", "block=24", "scope=group", "selection_cache=false"}));
}

TEST(CudaPolicy, HardVoteMatchesTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  // each head's top 256 votes; the soft vote breaks ties below one vote
  expect_matches_cpu(model,
                     policy("tokenselect", {"top_k=256", "sinks=16", "local=64", "prefill=dense",
                                            "aggregation=hard_vote", "selection_cache=false"}));
  expect_matches_cpu(model, policy("tokenselect", {"top_k=256", "sinks=16", "local=64",
                                                   "prefill=chunk", "aggregation=hard_vote",
                                                   "scope=group", "selection_cache=false"}));
}

TEST(CudaPolicy, SketchKeysMatchTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  // the JL projection (sketch_dim = head_dim / 8 = 8 on SmolLM2), decode and chunk prefill
  expect_matches_cpu(model, policy("sketch", {"top_k=256", "sinks=16", "local=64", "prefill=dense",
                                              "selection_cache=false"}));
  expect_matches_cpu(
      model, policy("sketch", {"top_k=256", "sinks=16", "local=64", "prefill=chunk", "theta=-1"}));
  expect_matches_cpu(model, policy("sketch", {"top_k=256", "sinks=16", "local=64", "prefill=dense",
                                              "scope=group", "sketch_shared=false",
                                              "aggregation=raw_sum", "selection_cache=false"}));
  // a PCA basis (fitted to random keys here: the GPU must project as the CPU does)
  const ModelHParams& hp = model->hp;
  KeyMoments km(hp.n_layer, hp.n_head_kv, hp.head_dim);
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> keys(static_cast<size_t>(256) * hp.head_dim);
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    for (int32_t h = 0; h < hp.n_head_kv; ++h) {
      for (size_t i = 0; i < keys.size(); ++i)
        keys[i] = nd(rng) * (1.0f + static_cast<float>(i % hp.head_dim) / 8);
      km.add(il, h, keys.data(), 256);
    }
  }
  const std::string path =
      (std::filesystem::temp_directory_path() / "sieve_cuda_policy_basis.json").string();
  ASSERT_TRUE(save_sketch_basis(km.fit(8), path).ok());
  expect_matches_cpu(model, policy("sketch", {"top_k=256", "sinks=16", "local=64", "prefill=dense",
                                              "selection_cache=false", "sketch_basis=" + path}));
  std::filesystem::remove(path);
}

TEST(CudaPolicy, QuestBlocksMatchTheCpu) {
  REQUIRE_GPU_AND_MODEL();
  // the preset: bounds per KV head (scope=group), blocks of 16, chunk prefill
  expect_matches_cpu(model, policy("quest", {"top_k=256", "sinks=16", "local=64"}));
  // the layer's heads summed, blocks of 24 (not a page), partial blocks at the range's ends
  expect_matches_cpu(model, policy("quest", {"top_k=240", "sinks=20", "local=70", "block=24",
                                             "scope=layer", "prefill=dense"}));
}

// What the GPU still cannot run is refused by knob value, naming the knob and the backend.
TEST(CudaPolicy, PresetsTheGpuLacksAreRefusedByKnob) {
  for (const char* preset : {"h2o", "stca", "uniprefill"}) {
    auto p = make_policy(preset);
    ASSERT_TRUE(p.ok());
    auto g = gpu_policy_from(*p);
    ASSERT_FALSE(g.ok()) << preset;
    EXPECT_NE(g.message().find("CUDA backend"), std::string::npos) << g.message();
  }
  for (const char* preset : {"streaming", "sketch", "tokenselect", "quest"}) {
    auto p = make_policy(preset);
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(gpu_policy_from(*p).ok()) << preset << ": " << gpu_policy_from(*p).message();
  }
  auto hv = make_policy("sketch", std::vector<std::string>{"aggregation=hard_vote"});
  ASSERT_TRUE(hv.ok());
  auto g = gpu_policy_from(*hv);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("aggregation=hard_vote"), std::string::npos) << g.message();
}

// The knob values land in the GPU policy as the CPU reads them (no device needed).
TEST(CudaPolicy, KnobsMapToTheGpuPolicy) {
  auto gp = [](std::string_view preset, std::vector<std::string> knobs,
               const ModelHParams* hp = nullptr) {
    auto p = make_policy(preset, knobs);
    EXPECT_TRUE(p.ok()) << p.message();
    return gpu_policy_from(*p, hp);
  };
  auto st = gp("streaming", {"sinks=16", "local=256"});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(st->scorer, GpuScorer::none);
  EXPECT_EQ(st->threshold, 16 + 256);  // sinks + top_k (0) + local
  EXPECT_TRUE(st->selection_cache);
  EXPECT_FALSE(st->selects(272));
  EXPECT_TRUE(st->selects(273));
  auto mc = gp("tokenselect", {"min_context=1000", "top_k=1024", "top_p=0.5", "min_keep=32"});
  ASSERT_TRUE(mc.ok()) << mc.message();
  EXPECT_EQ(mc->threshold, 1000);
  EXPECT_EQ(mc->top_p, 0.5f);
  EXPECT_EQ(mc->min_keep, 32);
  auto qu = gp("quest", {"top_k=240", "block=24", "top_p=0.9", "pool_kernel=5"});
  ASSERT_TRUE(qu.ok()) << qu.message();
  EXPECT_EQ(qu->scorer, GpuScorer::quest);
  EXPECT_EQ(qu->block, 24);
  EXPECT_FALSE(qu->layer_vote);
  EXPECT_FALSE(qu->selection_cache);
  EXPECT_EQ(qu->top_p, 0.f);  // the CPU's quest takes top blocks only, unpooled
  EXPECT_EQ(qu->pool, 0);
  EXPECT_FALSE(gp("quest", {"top_k=8192"}).ok());  // its blocks and two partial ones must fit
  auto hv = gp("tokenselect", {"aggregation=hard_vote", "pool_kernel=3", "raw_logits=true"});
  ASSERT_TRUE(hv.ok()) << hv.message();
  EXPECT_TRUE(hv->hard_vote);
  EXPECT_EQ(hv->pool, 3);
  EXPECT_TRUE(hv->raw_logits);
  EXPECT_FALSE(gp("tokenselect", {"aggregation=raw_sum", "top_p=0.9"}).ok());
  EXPECT_FALSE(gp("tokenselect", {"top_k=0", "top_p=0.9"}).ok());
  auto bl = gp("tokenselect", {"block=16", "top_k=1000"});
  ASSERT_TRUE(bl.ok()) << bl.message();
  EXPECT_EQ(bl->block, 16);
  EXPECT_FALSE(gp("tokenselect", {"block=3", "top_k=8192"}).ok());  // 2731 blocks: 8193 tokens
  EXPECT_FALSE(gp("tokenselect", {"score_positions=none"}).ok());
  // the sketch kernels take 8, 16 or 32 dimensions
  ModelHParams hp;
  hp.n_layer = 2;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 64;
  auto sk = gp("sketch", {}, &hp);
  ASSERT_TRUE(sk.ok()) << sk.message();
  EXPECT_EQ(sk->scorer, GpuScorer::sketch);
  auto odd = gp("sketch", {"sketch_dim=12"}, &hp);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.message().find("sketch_dim=12"), std::string::npos) << odd.message();
}

}  // namespace
}  // namespace sieve

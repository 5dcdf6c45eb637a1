// The sparse pipeline inside the forward pass, on the real SmolLM2 model: with an unlimited
// budget every preset (and compact positions) equals dense; the selection cache obeys theta;
// eviction keeps order, positions, sinks and window, and really returns pages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "backend/cpu/attention.h"
#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/engine_test_util.h"
#include "engine/forward.h"
#include "engine/kv_binding.h"
#include "engine/sampler.h"
#include "engine/sparse_seq.h"
#include "gguf/test_models.h"

namespace sieve {
namespace {

std::shared_ptr<const Model> smollm2() {
  return test_smollm2();
}
bool short_mode() {
  return test_short_mode();
}

std::vector<int32_t> long_prompt(const Model& m, int n_tokens) {
  return test_long_prompt(m, n_tokens);
}

struct RunOut {
  std::vector<std::vector<float>> logits;  // per step
  SparseStats stats;
  int64_t kept_bytes = 0;  // keep_rows' copies held at the end
  std::vector<double>
      importance_mass;  // per layer, eviction policies: the sum of the importance held
};

// Prefill in chunks, then greedy decode; the sparse state (when given) rides along.
RunOut run_model(const Model& m, const std::vector<int32_t>& prompt, int chunk, int n_decode,
                 const PolicyConfig* policy, int32_t budget_tokens = 0,
                 bool check_evictions = false, int threads = 2) {
  ThreadPool pool(threads);
  SketchProjection sketch(policy ? sketch_spec_for(*policy, m.hp) : SketchSpec{});
  KvConfig c = kv_config_for(m.hp, 0, 16, "test");
  c.sketch_dim = sketch.spec().dim;
  c.budget_bytes = kv_budget_bytes(m.hp, budget_tokens ? budget_tokens : 4096, 1, 16, c.sketch_dim);
  auto store = KvStore::create(c);
  EXPECT_TRUE(store.ok()) << store.message();
  KvStore& kv = store.value();
  Forward fwd(m, pool, kv, &sketch);
  std::unique_ptr<SparseSeq> sp;
  if (policy) {
    sp = std::make_unique<SparseSeq>(*policy, m.hp);
    sp->prompt_tokens = static_cast<int64_t>(prompt.size());
  }
  auto added = kv.add_sequence({});
  EXPECT_TRUE(added.ok());
  const KvSeqId seq = added->seq;
  RunOut r;
  std::vector<int32_t> toks = prompt;
  std::vector<float> logits;
  auto step = [&](std::span<const int32_t> t) {
    const KvAppend app{seq, t};
    auto room = kv.reserve(std::span<const KvAppend>(&app, 1));
    ASSERT_TRUE(room.ok() && room->fits());
    BatchEntry e{seq, t, false, sp.get()};
    ASSERT_TRUE(fwd.run(std::span<const BatchEntry>(&e, 1), logits).ok());
    if (sp) {
      ASSERT_TRUE(sparse_after_step(kv, seq, *sp, m.hp).ok());
    }
    r.logits.push_back(logits);
    if (check_evictions) {
      ASSERT_TRUE(kv.check_invariants().ok());
      const PolicyConfig& P = *policy;
      const int32_t n = kv.n_tokens(seq);
      for (int il = 0; il < m.hp.n_layer; ++il) {
        const KvSeqView v = kv.seq_view(seq, il);
        ASSERT_LE(v.n_tokens, P.kv_budget + chunk);
        for (int32_t j = 1; j < v.n_tokens; ++j) ASSERT_LT(v.position(j - 1), v.position(j));
        for (int32_t j = 0; j < std::min(P.sinks, v.n_tokens); ++j) ASSERT_EQ(v.position(j), j);
        // the window: the last `local` positions are all there
        for (int32_t j = 0; j < std::min(P.local, v.n_tokens); ++j) {
          ASSERT_EQ(v.position(v.n_tokens - 1 - j), n - 1 - j);
        }
      }
    }
  };
  for (size_t i = 0; i < prompt.size(); i += chunk) {
    const size_t n = std::min<size_t>(chunk, prompt.size() - i);
    step(std::span<const int32_t>(prompt.data() + i, n));
  }
  for (int g = 0; g < n_decode; ++g) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    toks.push_back(next);
    step(std::span<const int32_t>(&toks.back(), 1));
  }
  if (sp) {
    r.stats = sp->stats;
    r.kept_bytes = sp->kept_bytes();
    for (int il = 0; il < m.hp.n_layer; ++il) {
      double sum = 0;
      for (float v : sp->layer(il).importance) sum += v;
      r.importance_mass.push_back(sum);
    }
  }
  return r;
}

TEST(Sparse, UnlimitedBudgetEqualsDenseForEveryPreset) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const int n = short_mode() ? 80 : 200, chunk = short_mode() ? 32 : 64, n_dec = 3;
  const auto prompt = long_prompt(*m, n);
  const RunOut dense = run_model(*m, prompt, chunk, n_dec, nullptr);
  const char* presets[] = {"streaming", "quest", "h2o", "tokenselect", "sketch", "stca"};
  for (const char* name : presets) {
    for (const char* positions : {"original", "compact"}) {
      if (std::string(name) == "stca" && std::string(positions) == "compact") continue;
      auto p = make_policy(
          name, std::vector<std::string>{"kv_budget=2000000", "min_context=1", "top_k=1000000",
                                         "local=1000000" /* streaming */, "sinks=4",
                                         std::string("positions=") + positions});
      ASSERT_TRUE(p.ok()) << p.message();
      if (std::string(name) != "streaming") {
        ASSERT_TRUE(set_policy_knob(*p, "local=8").ok());
      }
      const RunOut sp = run_model(*m, prompt, chunk, n_dec, &*p);
      ASSERT_EQ(sp.logits.size(), dense.logits.size());
      for (size_t s = 0; s < sp.logits.size(); ++s) {
        EXPECT_LT(max_abs_diff(sp.logits[s], dense.logits[s]), 1e-3f)
            << name << " " << positions << " step " << s;
      }
      EXPECT_GT(sp.stats.layer_steps, 0) << name;
      EXPECT_NEAR(sp.stats.selected_fraction(), 1.0, 1e-9) << name;  // everything was read
    }
  }
}

// A decode row over a selection longer than kAttnSegment is split by keys across threads, at
// attend()'s own segment boundaries: 16 threads give the one-thread logits bit for bit, with
// original and with compact positions (each part renumbers from its first key).
TEST(Sparse, DecodeOverASelectionSplitAcrossThreadsEqualsOneThread) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 640 : 700);
  for (const char* positions : {"original", "compact"}) {
    auto p = make_policy("tokenselect", std::vector<std::string>{
                                            "sinks=16", "local=64", "top_k=520", "min_context=1",
                                            std::string("positions=") + positions});
    ASSERT_TRUE(p.ok()) << p.message();
    static_assert(16 + 520 + 64 > kAttnSegment, "the decode rows are split");
    const RunOut one = run_model(*m, prompt, 128, 3, &*p, 0, false, 1);
    const RunOut many = run_model(*m, prompt, 128, 3, &*p, 0, false, 16);
    ASSERT_EQ(one.logits.size(), many.logits.size());
    for (size_t s = 0; s < one.logits.size(); ++s) {
      EXPECT_EQ(max_abs_diff(one.logits[s], many.logits[s]), 0.0f) << positions << " step " << s;
    }
    // The rows did select (short mode's 640-token prompt leaves only ~40 tokens out).
    EXPECT_GT(many.stats.selections, 0) << positions;
    EXPECT_LT(many.stats.selected_fraction(), 1.0) << positions;
  }
}

TEST(Sparse, LimitedBudgetReadsLessAndStaysClose) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 160 : 320);
  const RunOut dense = run_model(*m, prompt, 64, 4, nullptr);
  for (const char* name : {"tokenselect", "sketch", "quest", "streaming"}) {
    auto p = make_policy(name, std::vector<std::string>{"sinks=8", "local=32", "top_k=48"});
    ASSERT_TRUE(p.ok()) << p.message();
    if (std::string(name) == "streaming") {
      ASSERT_TRUE(set_policy_knob(*p, "local=80").ok());
    }
    const RunOut sp = run_model(*m, prompt, 64, 4, &*p);
    EXPECT_LT(sp.stats.selected_fraction(), 0.9) << name;
    for (const auto& l : sp.logits.back()) ASSERT_TRUE(std::isfinite(l)) << name;
  }
}

// prefill_tail: chunks reaching into the prompt's last N tokens prefill densely. N >= the
// prompt is prefill=dense; a shorter tail leaves the earlier chunks' selections as they were.
TEST(Sparse, PrefillTailRunsTheLastChunksDensely) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, 320);
  auto ts = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"sinks=8", "local=32", "top_k=48", "selection_cache=false",
                               "prefill=chunk"};
    a.insert(a.end(), extra.begin(), extra.end());
    auto p = make_policy("tokenselect", a);
    EXPECT_TRUE(p.ok()) << p.message();
    return run_model(*m, prompt, 64, 2, &*p);
  };
  const RunOut chunk = ts({}), dense = ts({"prefill=dense"});
  const RunOut all = ts({"prefill_tail=320"}), part = ts({"prefill_tail=100"});
  ASSERT_EQ(all.logits.size(), dense.logits.size());
  for (size_t s = 0; s < all.logits.size(); ++s) EXPECT_EQ(all.logits[s], dense.logits[s]) << s;
  // Chunks ending at 64, 128, 192 (<= 320 - 100) select; those ending at 256 and 320 do not.
  for (size_t s = 0; s < 3; ++s) EXPECT_EQ(part.logits[s], chunk.logits[s]) << s;
  EXPECT_GT(max_abs_diff(part.logits[3], chunk.logits[3]), 1e-4f);
  EXPECT_GT(max_abs_diff(part.logits[4], dense.logits[4]), 1e-4f);
  // Under compact positions (auto past the trained context) every chunk selects: a dense
  // chunk would keep original positions, distances the model never saw.
  const RunOut compact = ts({"positions=compact"}),
               compact_tail = ts({"positions=compact", "prefill_tail=320"});
  ASSERT_EQ(compact.logits.size(), compact_tail.logits.size());
  for (size_t s = 0; s < compact.logits.size(); ++s)
    EXPECT_EQ(compact.logits[s], compact_tail.logits[s]) << s;
  EXPECT_GT(max_abs_diff(compact_tail.logits[4], dense.logits[4]), 1e-4f);
  EXPECT_FALSE(make_policy("tokenselect", std::vector<std::string>{"prefill_tail=-1"}).ok());
}

TEST(Sparse, SelectionCacheFollowsTheta) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 120 : 300);
  const int n_dec = short_mode() ? 4 : 8;
  auto always = make_policy(
      "tokenselect", std::vector<std::string>{"sinks=4", "local=16", "top_k=32", "theta=-1"});
  auto never = make_policy("tokenselect",
                           std::vector<std::string>{"sinks=4", "local=16", "top_k=32", "theta=1"});
  ASSERT_TRUE(always.ok() && never.ok());
  const RunOut a = run_model(*m, prompt, 64, n_dec, &*always);
  const RunOut b = run_model(*m, prompt, 64, n_dec, &*never);
  // theta = -1: every lookup but each layer's first reuses; theta = 1: a reuse needs an
  // identical direction, which consecutive queries never have.
  EXPECT_EQ(a.stats.cache_lookups, int64_t{n_dec} * m->hp.n_layer);
  EXPECT_EQ(a.stats.cache_hits, a.stats.cache_lookups - m->hp.n_layer);
  EXPECT_EQ(b.stats.cache_lookups, a.stats.cache_lookups);
  EXPECT_EQ(b.stats.cache_hits, 0);
  EXPECT_LT(a.stats.selections, b.stats.selections);
  // compact_theta replaces theta while compact positions are in effect, and only then.
  auto compact = make_policy("tokenselect",
                             std::vector<std::string>{"sinks=4", "local=16", "top_k=32", "theta=-1",
                                                      "compact_theta=1", "positions=compact"});
  auto original = make_policy(
      "tokenselect", std::vector<std::string>{"sinks=4", "local=16", "top_k=32", "theta=-1",
                                              "compact_theta=1", "positions=original"});
  ASSERT_TRUE(compact.ok() && original.ok());
  EXPECT_EQ(run_model(*m, prompt, 64, n_dec, &*compact).stats.cache_hits, 0);
  EXPECT_EQ(run_model(*m, prompt, 64, n_dec, &*original).stats.cache_hits, a.stats.cache_hits);
  EXPECT_FALSE(make_policy("tokenselect", std::vector<std::string>{"compact_theta=-0.5"}).ok());
}

// keep_rows: a selection's sinks and picks are written to a copy by the attention of the step
// that selects them and read from it while the selection is reused (auto, the default: only
// under compact positions). Under original positions the copy is exact, so the logits equal
// gathering the rows every step bit for bit, across misses that replace the selection (a stale copy
// would show). Under compact positions K is rounded to f16 after its re-rotation (as the cache
// rounded it at its own position), so they stay close; there every step reuses (theta -1), since a
// rounding can move a cosine across theta and the two runs would then select differently.
TEST(Sparse, KeptRowsEqualGatheringTheRows) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 160 : 320);
  const int n_dec = short_mode() ? 6 : 10;
  for (const char* positions : {"original", "compact"}) {
    auto run = [&](const char* keep) {
      const bool original = std::string(positions) == "original";
      auto p =
          make_policy("tokenselect", std::vector<std::string>{"sinks=8", "local=32", "top_k=48",
                                                              original ? "theta=0.9" : "theta=-1",
                                                              std::string("positions=") + positions,
                                                              std::string("keep_rows=") + keep});
      EXPECT_TRUE(p.ok()) << p.message();
      return run_model(*m, prompt, 64, n_dec, &*p);
    };
    const RunOut kept = run("true"), gathered = run("false");
    // auto (the default) keeps rows exactly while compact positions are in effect.
    const RunOut by_default = run("auto");
    const RunOut& want = std::string(positions) == "compact" ? kept : gathered;
    EXPECT_EQ(by_default.logits, want.logits) << positions;
    EXPECT_EQ(by_default.kept_bytes, want.kept_bytes) << positions;
    ASSERT_GT(kept.stats.cache_hits, 0) << positions;
    EXPECT_EQ(kept.stats.cache_hits, gathered.stats.cache_hits) << positions;
    if (std::string(positions) == "original") {
      // Both reuses and replaced selections happened during decode.
      ASSERT_LT(kept.stats.cache_hits, kept.stats.cache_lookups - m->hp.n_layer);
      EXPECT_EQ(kept.logits, gathered.logits);
    } else {
      // The prefill is untouched. The rounding moves these repetitive prompts' logits by up to
      // ~0.5 (of ~25) on the first decode steps (the selecting one rotates every kept key
      // rather than turning the query, then two reuses); the greedy tokens diverge a few
      // steps later. A wrong rotation or a stale row moves them by far more (the exact
      // equivalence: Attend.KeptRowsEqualTheGather).
      const size_t first_decode = (prompt.size() + 63) / 64;
      for (size_t i = 0; i < first_decode; ++i)
        EXPECT_EQ(kept.logits[i], gathered.logits[i]) << "step " << i;
      for (size_t i = first_decode; i < first_decode + 3; ++i) {
        EXPECT_LT(max_abs_diff(kept.logits[i], gathered.logits[i]), 1.0f) << "step " << i;
        EXPECT_EQ(argmax(kept.logits[i]), argmax(gathered.logits[i])) << "step " << i;
      }
    }
    // The copy holds at most sinks + top_k K and V rows per layer and KV head.
    EXPECT_GT(kept.kept_bytes, 0) << positions;
    EXPECT_LE(kept.kept_bytes,
              int64_t{m->hp.n_layer} * m->hp.n_head_kv * (8 + 48) * m->hp.head_dim * 2 * 2);
    EXPECT_EQ(gathered.kept_bytes, 0) << positions;
  }
  EXPECT_FALSE(make_policy("tokenselect", std::vector<std::string>{"keep_rows=maybe"}).ok());
  EXPECT_EQ(make_policy("tokenselect")->keep_rows, KeepRows::auto_);
}

// Top-p without a top-k cap: the picks have no bound, so the kept rows live in their own
// buffers rather than the sequence's arena slots (SparseSeq::kept_storage); still exact.
TEST(Sparse, KeptRowsOfAnUncappedTopPSet) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 160 : 320);
  auto run = [&](const char* keep) {
    auto p = make_policy(
        "tokenselect",
        std::vector<std::string>{"sinks=8", "local=32", "top_k=0", "top_p=0.5", "theta=0.9",
                                 "positions=original", std::string("keep_rows=") + keep});
    EXPECT_TRUE(p.ok()) << p.message();
    return run_model(*m, prompt, 64, short_mode() ? 6 : 10, &*p);
  };
  const RunOut kept = run("true"), gathered = run("false");
  ASSERT_GT(kept.stats.cache_hits, 0);
  EXPECT_EQ(kept.logits, gathered.logits);
  EXPECT_GT(kept.kept_bytes, 0);
  EXPECT_EQ(gathered.kept_bytes, 0);
}

// score_positions: `none` ranks keys by pre-RoPE dot products (the query and every key turned
// to position 0; KeyScores.FixedPositionZeroEqualsPreRopeDots checks the scores), which picks
// other tokens than the RoPE-distance scores of `original`; `auto` is `none` exactly while
// compact positions are in effect and `original` otherwise (bitwise equal logits).
TEST(Sparse, ScorePositionsAutoIsPreRopeUnderCompactPositions) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 160 : 320);
  auto ts = [&](const char* positions, const char* scores) {
    auto p = make_policy("tokenselect",
                         std::vector<std::string>{"sinks=8", "local=32", "top_k=48",
                                                  std::string("positions=") + positions,
                                                  std::string("score_positions=") + scores});
    EXPECT_TRUE(p.ok()) << p.message();
    return run_model(*m, prompt, 64, 3, &*p).logits;
  };
  const auto orig = ts("original", "original"), none = ts("original", "none"),
             orig_auto = ts("original", "auto");
  const auto c_orig = ts("compact", "original"), c_none = ts("compact", "none"),
             c_auto = ts("compact", "auto");
  EXPECT_EQ(orig_auto, orig);
  EXPECT_EQ(c_auto, c_none);
  EXPECT_GT(max_abs_diff(none.back(), orig.back()), 1e-4f);
  EXPECT_GT(max_abs_diff(c_none.back(), c_orig.back()), 1e-4f);
  EXPECT_EQ(make_policy("tokenselect")->score_positions, ScorePositions::auto_);
  EXPECT_FALSE(make_policy("tokenselect", std::vector<std::string>{"score_positions=rope"}).ok());
}

TEST(Sparse, EvictionKeepsOrderPositionsSinksAndWindow) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 200 : 320);
  for (const char* name : {"stca", "h2o"}) {
    auto p = make_policy(name, std::vector<std::string>{"sinks=4", "local=32", "top_k=32",
                                                        "kv_budget=120", "evict_floor=16"});
    ASSERT_TRUE(p.ok()) << p.message();
    const RunOut r = run_model(*m, prompt, 64, 6, &*p, 1024, /*check_evictions=*/true);
    EXPECT_GT(r.stats.tokens_evicted, 0) << name;
    for (const auto& l : r.logits.back()) ASSERT_TRUE(std::isfinite(l)) << name;
  }
}

// stca reuses selections like tokenselect; a step that reuses one adds that selection's
// votes to the importance again, so every decode step counts (each adds a mass of 1 per
// layer: the softmaxes of the layer's heads, weighted 1 / n_head). Without eviction and decay
// the mass is the same whether every step reuses (theta -1) or none does (theta 1). The same
// holds where the layer is too short to select (top_k 1000 of 300 tokens) but still scores
// for its importance: there the cache reuses the votes alone.
void check_stca_reuse(const char* top_k) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = long_prompt(*m, short_mode() ? 120 : 300);
  const int n_dec = short_mode() ? 4 : 8;
  const std::vector<std::string> base = {"sinks=4", "local=16", top_k, "kv_budget=100000",
                                         "decay=1"};
  auto with = [&](const char* kv) {
    std::vector<std::string> k = base;
    k.emplace_back(kv);
    auto p = make_policy("stca", k);
    EXPECT_TRUE(p.ok()) << p.message();
    return run_model(*m, prompt, 64, n_dec, &*p);
  };
  const RunOut always = with("theta=-1"), never = with("theta=1");
  EXPECT_EQ(always.stats.cache_hits, always.stats.cache_lookups - m->hp.n_layer);
  EXPECT_EQ(never.stats.cache_hits, 0);
  EXPECT_EQ(always.stats.tokens_evicted, 0);
  ASSERT_EQ(always.importance_mass.size(), never.importance_mass.size());
  for (size_t il = 0; il < always.importance_mass.size(); ++il) {
    EXPECT_NEAR(always.importance_mass[il], never.importance_mass[il], 1e-3) << "layer " << il;
  }
  // The mass is the prefill chunks' votes plus one per decode step.
  const RunOut prefill_only = [&] {
    auto p = make_policy("stca", base);
    EXPECT_TRUE(p.ok());
    return run_model(*m, prompt, 64, 0, &*p);
  }();
  EXPECT_NEAR(always.importance_mass[0] - prefill_only.importance_mass[0], n_dec, 1e-3);
}

TEST(Sparse, StcaReusedSelectionsStillAccumulateImportance) {
  for (const char* top_k : {"top_k=32", "top_k=1000"}) {
    SCOPED_TRACE(top_k);
    check_stca_reuse(top_k);
  }
}

// Continuous batching with a different policy per request gives each request the tokens it
// gets alone (the selection is per sequence; batching changes no arithmetic). Prompts are
// prefilled in one chunk on both sides: chunk-prefill selection and eviction points depend
// on where chunks end, which the scheduler's token budget decides.
TEST(Sparse, MixedPoliciesInOneBatchEqualSingleRuns) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const int n_prompt = short_mode() ? 120 : 260, n_gen = short_mode() ? 4 : 8;
  const char* names[] = {"dense", "tokenselect", "sketch", "stca", "quest", "h2o"};
  std::vector<PolicyPtr> policies;
  for (const char* n : names) {
    std::vector<std::string> k = {"sinks=4", "local=16", "top_k=24"};
    if (std::string(n) == "stca" || std::string(n) == "h2o") k.push_back("kv_budget=64");
    if (std::string(n) == "dense") {
      k.clear();
    }
    auto p = make_policy(n, k);
    ASSERT_TRUE(p.ok()) << p.message();
    policies.push_back(std::make_shared<const PolicyConfig>(*p));
  }
  std::vector<std::vector<int32_t>> prompts, alone;
  ThreadPool pool(2);
  for (size_t i = 0; i < policies.size(); ++i) {
    auto pr = long_prompt(*m, n_prompt + static_cast<int>(i) * 7);
    prompts.push_back(pr);
    SequenceEngineConfig sc;
    sc.n_ctx = 1024;
    sc.pool = &pool;
    auto gen = SequenceEngine::create(m, sc);
    ASSERT_TRUE(gen.ok()) << gen.message();
    GenerateOptions g;
    g.n_predict = n_gen;
    g.n_batch = 4096;
    g.stop_at_eog = false;
    g.policy = policies[i];
    std::vector<int32_t> out;
    auto st = (*gen)->generate(pr, g, [&](int32_t t) {
      out.push_back(t);
      return true;
    });
    ASSERT_TRUE(st.ok()) << st.message();
    if (i > 0) {
      EXPECT_LT(st->sparse.selected_fraction(), 1.0) << names[i];
    }
    alone.push_back(out);
  }
  EngineConfig ec;
  ec.threads = 2;
  ec.n_ctx = 1024;
  ec.max_batch_tokens = 4096;
  ec.max_running = 8;
  auto eng = Engine::create(m, ec);
  ASSERT_TRUE(eng.ok()) << eng.message();
  std::mutex mu;
  std::vector<std::vector<int32_t>> got(policies.size());
  std::vector<std::string> used(policies.size());
  for (size_t i = 0; i < policies.size(); ++i) {
    RequestParams rp;
    rp.prompt = prompts[i];
    rp.max_tokens = n_gen;
    rp.stop_at_eog = false;
    rp.policy = policies[i];
    (*eng)->submit(rp, [&, i](const RequestEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) got[i].push_back(ev.token);
      if (ev.finished) {
        EXPECT_TRUE(ev.error.empty()) << ev.error;
        used[i] = ev.policy;
      }
    });
  }
  ASSERT_TRUE((*eng)->wait_idle(std::chrono::minutes(5)));
  for (size_t i = 0; i < policies.size(); ++i) {
    EXPECT_EQ(got[i], alone[i]) << names[i];
    EXPECT_EQ(used[i].rfind(names[i], 0), 0u) << used[i];
  }
}

}  // namespace
}  // namespace sieve

namespace sieve {
namespace {

// The PCA sketch basis (sketch_basis knob): with the identity as every (layer, KV head)'s
// basis, sketch scores are q.k itself, so the sketch preset runs as its exact-scored twin.
TEST(Sparse, SketchBasisOfFullRankScoresAsTheExactScorer) {
  auto m = smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const ModelHParams& hp = m->hp;
  auto basis = std::make_shared<SketchBasis>();
  basis->n_layer = hp.n_layer;
  basis->n_kv_head = hp.n_head_kv;
  basis->head_dim = basis->dim = hp.head_dim;
  basis->fitted.assign(hp.n_layer, 1);
  basis->captured.assign(static_cast<size_t>(hp.n_layer) * hp.n_head_kv, 1.0);
  basis->p.assign(static_cast<size_t>(hp.n_layer) * hp.n_head_kv * hp.head_dim * hp.head_dim, 0.0f);
  for (size_t u = 0; u < static_cast<size_t>(hp.n_layer) * hp.n_head_kv; ++u) {
    for (int32_t i = 0; i < hp.head_dim; ++i)
      basis->p[(u * hp.head_dim + i) * hp.head_dim + i] = 1.0f;
  }
  // per process: the same test of another build running at the same time must not rewrite it
  const std::string path =
      ::testing::TempDir() + "identity_basis_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE(save_sketch_basis(*basis, path).ok());
  const std::vector<std::string> knobs = {"sinks=8", "local=32", "top_k=48"};
  auto pca = make_policy("sketch", knobs);
  auto exact = make_policy("sketch", knobs);
  ASSERT_TRUE(pca.ok() && exact.ok());
  ASSERT_TRUE(set_policy_knob(*pca, "sketch_basis", path).ok());
  ASSERT_TRUE(set_policy_knob(*exact, "scorer=exact").ok());
  ASSERT_TRUE(check_policy_for_model(*pca, hp).ok());
  EXPECT_EQ(sketch_spec_for(*pca, hp).dim, hp.head_dim);

  const auto prompt = long_prompt(*m, short_mode() ? 160 : 320);
  auto jl = make_policy("sketch", knobs);
  ASSERT_TRUE(jl.ok());
  const RunOut a = run_model(*m, prompt, 64, 4, &*pca);
  const RunOut b = run_model(*m, prompt, 64, 4, &*exact);
  const RunOut c = run_model(*m, prompt, 64, 4, &*jl);
  EXPECT_LT(a.stats.selected_fraction(), 0.9);
  EXPECT_EQ(a.stats.selected_tokens, b.stats.selected_tokens);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  // Sketch keys are the f32 keys, the exact scorer reads their f16 copies: the prefill chunks
  // select the same tokens (bitwise equal logits) but where two keys' scores tie within the
  // f16 rounding; such a flip (one prefill step in this prompt since the vectorised SiLU
  // moved the activations by an ulp) stays far below the random projection's disagreement.
  const size_t n_prefill = (prompt.size() + 63) / 64;
  float d_pca = 0, d_jl = 0;
  size_t prefill_differ = 0;
  for (size_t s = 0; s < a.logits.size(); ++s) {
    if (s < n_prefill && max_abs_diff(a.logits[s], b.logits[s]) >= 1e-4f) ++prefill_differ;
    d_pca = std::max(d_pca, max_abs_diff(a.logits[s], b.logits[s]));
    d_jl = std::max(d_jl, max_abs_diff(c.logits[s], b.logits[s]));
  }
  EXPECT_LE(prefill_differ, 1u) << "of " << n_prefill << " prefill steps";
  EXPECT_LT(d_pca, 0.25f * d_jl) << "identity basis " << d_pca << ", JL " << d_jl;

  // A basis for another shape is refused with the command that makes a fitting one.
  basis->n_layer = hp.n_layer + 1;
  basis->fitted.push_back(1);
  basis->captured.resize(static_cast<size_t>(basis->n_layer) * hp.n_head_kv, 1.0);
  basis->p.resize(static_cast<size_t>(basis->n_layer) * hp.n_head_kv * hp.head_dim * hp.head_dim,
                  0.0f);
  ASSERT_TRUE(save_sketch_basis(*basis, path).ok());
  ASSERT_TRUE(set_policy_knob(*pca, "sketch_basis", path).ok());
  const Status st = check_policy_for_model(*pca, hp);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("sieve calibrate"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sieve

// RTPurbo in the forward pass (docs/sparse.md "RTPurbo (head plan)"; the sinks + window kernel
// option is tested in src/backend/cpu/attention_test.cpp): an all-local plan with a window covering
// the context equals dense, the retrieval heads' indexer path selects keys and, given every
// candidate, equals dense; the policy asks for its head plan and layers without retrieval heads
// keep only sinks + window in the KV store.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/engine_test_util.h"
#include "engine/forward.h"
#include "engine/kv_binding.h"
#include "engine/sparse_seq.h"
#include "sparse/head_plan.h"

namespace sieve {
namespace {

std::vector<int32_t> prompt_of(const Model& m, int n_tokens) {
  return test_long_prompt(m, n_tokens);
}

struct Out {
  std::vector<std::vector<float>> logits;
  SparseStats stats;
  int64_t kv_bytes = 0;
};

// Chunked prefill then greedy decode in a store laid out for the policy (kv_layout_for), or
// as `force_layout` says.
Out run(const Model& m, const std::vector<int32_t>& prompt, int chunk, int n_dec,
        const PolicyConfig* policy, int threads = 2,
        const std::vector<KvCapacity>* force_layout = nullptr) {
  ThreadPool pool(threads);
  SketchProjection sketch(policy ? sketch_spec_for(*policy, m.hp) : SketchSpec{});
  const std::vector<KvCapacity> layout = force_layout ? *force_layout : kv_layout_for(policy, m.hp);
  KvConfig c = kv_config_for(m.hp, 0, 16, "test", &layout);
  c.sketch_dim = sketch.spec().dim;
  c.budget_bytes = kv_budget_bytes(m.hp, 4096, 1, 16, c.sketch_dim, chunk, &layout);
  auto store = KvStore::create(c);
  EXPECT_TRUE(store.ok()) << store.message();
  KvStore& kv = store.value();
  Forward fwd(m, pool, kv, &sketch);
  std::unique_ptr<SparseSeq> sp;
  if (policy) sp = std::make_unique<SparseSeq>(*policy, m.hp);
  auto added = kv.add_sequence({});
  const KvSeqId seq = added->seq;
  Out r;
  std::vector<int32_t> toks = prompt;
  std::vector<float> logits;
  auto step = [&](std::span<const int32_t> t) {
    const KvAppend app{seq, t};
    auto room = kv.reserve(std::span<const KvAppend>(&app, 1));
    ASSERT_TRUE(room.ok() && room->fits());
    BatchEntry e{seq, t, false, sp.get()};
    ASSERT_TRUE(fwd.run(std::span<const BatchEntry>(&e, 1), logits).ok());
    r.logits.push_back(logits);
  };
  for (size_t i = 0; i < prompt.size(); i += chunk) {
    step(std::span<const int32_t>(prompt.data() + i, std::min<size_t>(chunk, prompt.size() - i)));
  }
  for (int g = 0; g < n_dec; ++g) {
    toks.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    step(std::span<const int32_t>(&toks.back(), 1));
  }
  r.kv_bytes = kv.seq_bytes(seq);
  if (sp) r.stats = sp->stats;
  return r;
}

HeadShape shape_of(const Model& m) {
  return {m.hp.n_layer, m.hp.n_head, m.hp.n_head_kv, m.hp.head_dim};
}

std::string save_tmp(const HeadPlan& plan, const char* name) {
  const std::string path = ::testing::TempDir() + name;
  EXPECT_TRUE(save_head_plan(plan, path).ok());
  return path;
}

TEST(RtPurbo, PolicyNeedsAHeadPlan) {
  auto p = make_policy("rtpurbo", std::vector<std::string>{});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("sieve calibrate -m MODEL --out heads.json"), std::string::npos)
      << p.message();
  auto bad = make_policy("rtpurbo", std::vector<std::string>{"head_plan=/nonexistent/heads.json"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("head_plan"), std::string::npos) << bad.message();
}

TEST(RtPurbo, DefaultWindowIsAQuarterOfTheTrainedContext) {
  // 512 (a sixteenth) lost SmolLM2's needles at 8K; a quarter kept them (bench/RESULTS.md).
  PolicyConfig p;
  ModelHParams hp;
  hp.n_ctx_train = 8192;
  EXPECT_EQ(rt_window_for(p, hp), 2048);
  hp.n_ctx_train = 32768;
  EXPECT_EQ(rt_window_for(p, hp), 8192);
  hp.n_ctx_train = 128;
  EXPECT_EQ(rt_window_for(p, hp), 64);
  hp.n_ctx_train = 0;
  EXPECT_EQ(rt_window_for(p, hp), 2048);
  p.rt_window = 300;
  EXPECT_EQ(rt_window_for(p, hp), 300);
}

TEST(RtPurbo, AllLocalWideWindowEqualsDense) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const int n = test_short_mode() ? 80 : 160;
  const auto prompt = prompt_of(*m, n);
  const Out dense = run(*m, prompt, 64, 3, nullptr);
  const std::string path = save_tmp(HeadPlan::empty(shape_of(*m)), "rt_all_local.json");
  auto p =
      make_policy("rtpurbo", std::vector<std::string>{"head_plan=" + path, "rt_window=100000"});
  ASSERT_TRUE(p.ok()) << p.message();
  // Every layer is window-only (no retrieval head), with a window wider than the context.
  for (const KvCapacity& c : kv_layout_for(&*p, m->hp)) EXPECT_TRUE(c.is_window());
  const Out rt = run(*m, prompt, 64, 3, &*p);
  ASSERT_EQ(rt.logits.size(), dense.logits.size());
  for (size_t s = 0; s < rt.logits.size(); ++s)
    EXPECT_LT(max_abs_diff(rt.logits[s], dense.logits[s]), 1e-5f) << s;
  // A shape mismatch is an error, not a crash.
  HeadPlan other = HeadPlan::empty(HeadShape{3, 9, 3, 64});
  auto q = make_policy("rtpurbo",
                       std::vector<std::string>{"head_plan=" + save_tmp(other, "rt_other.json")});
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(check_head_plan_for(*q, m->hp).ok());
}

TEST(RtPurbo, SmallWindowKeepsLessKvAndChangesOutput) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = prompt_of(*m, 200);
  const Out dense = run(*m, prompt, 64, 2, nullptr);
  const std::string path = save_tmp(HeadPlan::empty(shape_of(*m)), "rt_all_local2.json");
  auto p = make_policy("rtpurbo",
                       std::vector<std::string>{"head_plan=" + path, "rt_window=32", "rt_sinks=4"});
  ASSERT_TRUE(p.ok()) << p.message();
  const Out rt = run(*m, prompt, 64, 2, &*p);
  EXPECT_LT(rt.kv_bytes, dense.kv_bytes / 2);
  EXPECT_GT(max_abs_diff(rt.logits.back(), dense.logits.back()), 1e-3f);
  for (float x : rt.logits.back()) ASSERT_TRUE(std::isfinite(x));
}

// A plan whose every head is a retrieval head with an identity indexer (d_idx = head_dim):
// the indexer scores are the pre-RoPE q.k.
HeadPlan identity_plan(const Model& m) {
  HeadPlan plan = HeadPlan::empty(shape_of(m));
  std::fill(plan.retrieval.begin(), plan.retrieval.end(), uint8_t{1});
  const int d = m.hp.head_dim;
  plan.d_idx = d;
  std::vector<float> eye(static_cast<size_t>(d) * d, 0.0f);
  for (int i = 0; i < d; ++i) eye[static_cast<size_t>(i) * d + i] = 1.0f;
  plan.w_q.assign(static_cast<size_t>(m.hp.n_layer) * m.hp.n_head, eye);
  plan.w_k.assign(static_cast<size_t>(m.hp.n_layer) * m.hp.n_head_kv, eye);
  plan.fit.assign(static_cast<size_t>(m.hp.n_layer) * m.hp.n_head, IndexerFit{});
  return plan;
}

TEST(RtPurbo, RetrievalHeadsSelectWithTheIndexer) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = prompt_of(*m, 240);
  const Out dense = run(*m, prompt, 64, 3, nullptr);
  const std::string path = save_tmp(identity_plan(*m), "rt_identity.json");
  // Every candidate selected (floor above the context): equals dense.
  auto all = make_policy("rtpurbo",
                         std::vector<std::string>{"head_plan=" + path, "rt_window=16", "rt_sinks=4",
                                                  "min_keep=100000", "top_k=100000"});
  ASSERT_TRUE(all.ok()) << all.message();
  EXPECT_EQ(sketch_spec_for(*all, m->hp).dim, m->hp.head_dim);
  const Out full = run(*m, prompt, 64, 3, &*all);
  for (size_t s = 0; s < full.logits.size(); ++s)
    EXPECT_LT(max_abs_diff(full.logits[s], dense.logits[s]), 1e-4f) << s;
  EXPECT_GT(full.stats.layer_steps, 0);
  EXPECT_NEAR(full.stats.selected_fraction(), 1.0, 1e-9);
  // top-p 0.5: fewer tokens, still finite.
  auto half =
      make_policy("rtpurbo", std::vector<std::string>{"head_plan=" + path, "rt_window=16",
                                                      "rt_sinks=4", "top_p=0.5", "min_keep=0"});
  ASSERT_TRUE(half.ok()) << half.message();
  const Out h = run(*m, prompt, 64, 3, &*half);
  EXPECT_GT(h.stats.layer_steps, 0);
  EXPECT_LT(h.stats.selected_fraction(), 0.9);
  EXPECT_GT(h.stats.mean_selected(), 0.0);
  for (float x : h.logits.back()) ASSERT_TRUE(std::isfinite(x));
  // rt_gain 4 sharpens the indexer's softmax: fewer tokens for the same p, and the same
  // selection as W_Q scaled by 4 (a power of two: the logits scale exactly).
  const std::vector<std::string> p90{"rt_window=16", "rt_sinks=4", "top_p=0.9", "min_keep=0"};
  auto with = [&](std::string plan_path, std::string gain) {
    std::vector<std::string> a = p90;
    a.push_back("head_plan=" + plan_path);
    a.push_back("rt_gain=" + gain);
    auto p = make_policy("rtpurbo", a);
    EXPECT_TRUE(p.ok()) << p.message();
    return run(*m, prompt, 64, 3, &*p);
  };
  const Out g1 = with(path, "1");
  const Out g4 = with(path, "4");
  EXPECT_LT(g4.stats.mean_selected(), 0.8 * g1.stats.mean_selected());
  HeadPlan scaled = identity_plan(*m);
  for (auto& w : scaled.w_q) {
    for (float& x : w) x *= 4.0f;
  }
  const Out s4 = with(save_tmp(scaled, "rt_identity_x4.json"), "1");
  EXPECT_EQ(s4.stats.mean_selected(), g4.stats.mean_selected());
  ASSERT_EQ(s4.logits.size(), g4.logits.size());
  for (size_t s = 0; s < s4.logits.size(); ++s)
    EXPECT_LT(max_abs_diff(s4.logits[s], g4.logits[s]), 1e-5f) << s;
}

// rt_refine: the indexer's picks re-scored exactly and cut by top-p with the sinks and window
// counted. Given every candidate, p = 1 only drops keys below kTopPSlack of the mass (the
// logits stay those of dense) and p = 0.999 keeps fewer keys, still close to dense: its mean
// |logit| error over the decode steps is below a top-p 0.9 indexer's alone (0.65 against
// 0.83 here; per step 0.41-1.09 against 0.54-0.98: which keys sit at the 0.999 cut moves with
// the activations' last bits, so one step may exceed the indexer's); after a top-p 0.9
// indexer a lower p keeps a subset (fewer tokens, more as p rises).
TEST(RtPurbo, RefineCutsTheIndexerPicksByExactMass) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = prompt_of(*m, 400);
  const std::string path = save_tmp(identity_plan(*m), "rt_refine.json");
  auto with = [&](const std::vector<std::string>& knobs) {
    std::vector<std::string> all{"head_plan=" + path, "rt_window=32", "rt_sinks=4", "min_keep=0"};
    all.insert(all.end(), knobs.begin(), knobs.end());
    auto p = make_policy("rtpurbo", all);
    EXPECT_TRUE(p.ok()) << p.message();
    return run(*m, prompt, 64, 4, &*p);
  };
  const Out dense = run(*m, prompt, 64, 4, nullptr);
  const std::vector<std::string> every{
      "top_p=1", "top_k=100000"};  // (no floor: it would bind the refinement too)
  auto plus = [&](std::string knob) {
    std::vector<std::string> k = every;
    k.push_back(std::move(knob));
    return with(k);
  };
  const Out all = with(every);
  const Out one = plus("rt_refine=1");
  const Out close = plus("rt_refine=0.999");
  EXPECT_LE(one.stats.mean_selected(), all.stats.mean_selected());
  EXPECT_LT(close.stats.mean_selected(), one.stats.mean_selected());
  EXPECT_GT(one.stats.bytes_read, all.stats.bytes_read);  // the exact pass reads K
  ASSERT_EQ(one.logits.size(), dense.logits.size());
  for (size_t s = 0; s < one.logits.size(); ++s) {
    EXPECT_LT(max_abs_diff(one.logits[s], dense.logits[s]), 1e-3f) << s;
    EXPECT_LT(max_abs_diff(close.logits[s], dense.logits[s]), 1.5f) << s;
  }
  const Out base = with({"top_p=0.9"});
  ASSERT_EQ(base.logits.size(), dense.logits.size());
  double err_close = 0, err_base = 0;
  for (size_t s = 0; s < dense.logits.size(); ++s) {
    err_close += max_abs_diff(close.logits[s], dense.logits[s]);
    err_base += max_abs_diff(base.logits[s], dense.logits[s]);
  }
  EXPECT_GT(err_base, 0.0);
  EXPECT_LT(err_close, err_base) << "summed max |logit| error over the steps";
  const Out r5 = with({"top_p=0.9", "rt_refine=0.5"});
  const Out r9 = with({"top_p=0.9", "rt_refine=0.9"});
  EXPECT_GT(r5.stats.layer_steps, 0);
  EXPECT_LT(r5.stats.mean_selected(), r9.stats.mean_selected());
  EXPECT_LT(r9.stats.mean_selected(), base.stats.mean_selected());
  for (float x : r5.logits.back()) ASSERT_TRUE(std::isfinite(x));
}

// Decode over key lists longer than an attention segment is split by keys across the threads
// (one task per segment, merged in order, the rows scattered to their heads): with every
// candidate selected it equals dense, and with local and retrieval heads mixed in a group and a
// top-p budget the split result equals the one-thread result (no split) bitwise.
TEST(RtPurbo, LongDecodeListsSplitByKeys) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = prompt_of(*m, 720);
  const Out dense = run(*m, prompt, 256, 2, nullptr);
  const std::string path = save_tmp(identity_plan(*m), "rt_identity_long.json");
  auto all = make_policy("rtpurbo",
                         std::vector<std::string>{"head_plan=" + path, "rt_window=16", "rt_sinks=4",
                                                  "min_keep=100000", "top_k=100000"});
  ASSERT_TRUE(all.ok()) << all.message();
  const Out full = run(*m, prompt, 256, 2, &*all);
  for (size_t s = prompt.size() / 256; s < full.logits.size(); ++s) {
    EXPECT_LT(max_abs_diff(full.logits[s], dense.logits[s]), 1e-4f) << s;
  }
  HeadPlan mixed = identity_plan(*m);
  for (int32_t il = 0; il < m->hp.n_layer; ++il) {
    for (int32_t h = 0; h < m->hp.n_head; ++h)
      mixed.retrieval[int64_t{il} * m->hp.n_head + h] = h % 3 != 1;
  }
  const std::string mpath = save_tmp(mixed, "rt_mixed_long.json");
  auto rt =
      make_policy("rtpurbo", std::vector<std::string>{"head_plan=" + mpath, "rt_window=64",
                                                      "rt_sinks=4", "top_p=0.99", "min_keep=600"});
  ASSERT_TRUE(rt.ok()) << rt.message();
  const Out two = run(*m, prompt, 256, 2, &*rt, 2);
  const Out one = run(*m, prompt, 256, 2, &*rt, 1);
  EXPECT_GT(two.stats.mean_selected(), 600.0);  // lists past one segment
  ASSERT_EQ(two.logits.size(), one.logits.size());
  for (size_t s = 0; s < two.logits.size(); ++s) ASSERT_EQ(two.logits[s], one.logits[s]) << s;
  // A local window wider than a segment: its decode tasks are split too (window_segments).
  // (mixed: every layer keeps KV heads 0 and 2 whole and windows KV head 1.)
  auto wide = make_policy("rtpurbo", std::vector<std::string>{"head_plan=" + mpath, "rt_window=600",
                                                              "rt_sinks=4", "top_p=0.9"});
  ASSERT_TRUE(wide.ok()) << wide.message();
  const Out wide2 = run(*m, prompt, 256, 2, &*wide, 2);
  const Out wide1 = run(*m, prompt, 256, 2, &*wide, 1);
  ASSERT_EQ(wide2.logits.size(), wide1.logits.size());
  for (size_t s = 0; s < wide2.logits.size(); ++s) ASSERT_EQ(wide2.logits[s], wide1.logits[s]) << s;
}

}  // namespace
}  // namespace sieve

namespace sieve {
namespace {

// A batch mixing a UniPrefill prompt that drops rows with an rtpurbo decode: after the drop
// compacts the batch, the decode's indexer must still read its own pre-RoPE query row
// (regression: it read the row at its old offset). Its logits equal the same decode alone.
TEST(RtPurbo, DecodeBesideADroppingPrefillReadsItsOwnQuery) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt_b = prompt_of(*m, 200);
  const auto prompt_a = prompt_of(*m, 320);
  const std::string path = save_tmp(identity_plan(*m), "rt_identity_mixed.json");
  auto rt =
      make_policy("rtpurbo", std::vector<std::string>{"head_plan=" + path, "rt_window=16",
                                                      "rt_sinks=4", "top_p=0.5", "min_keep=0"});
  ASSERT_TRUE(rt.ok()) << rt.message();
  PolicyConfig up = *make_policy("uniprefill");
  up.up_min_prompt = 0;
  up.up_layers = {2};
  up.up_p = 0.3f;
  up.up_block = 16;
  up.up_sinks = 16;
  up.up_tail = 32;
  ThreadPool pool(2);
  SketchProjection sketch(sketch_spec_for(*rt, m->hp));
  const std::vector<KvCapacity> layout = kv_layout_for(&*rt, m->hp);
  auto decode_b = [&](bool with_a) {
    KvConfig c = kv_config_for(m->hp, 0, 16, "test", &layout);
    c.sketch_dim = sketch.spec().dim;
    c.budget_bytes = kv_budget_bytes(m->hp, 1024, 2, 16, c.sketch_dim, 512, &layout);
    KvStore kv = std::move(KvStore::create(c).value());
    Forward fwd(*m, pool, kv, &sketch);
    SparseSeq sb(*rt, m->hp), sa(up, m->hp);
    const KvSeqId b = kv.add_sequence({})->seq, a = kv.add_sequence({})->seq;
    std::vector<float> logits;
    auto step = [&](std::vector<BatchEntry> batch) {
      std::vector<KvAppend> apps;
      for (const BatchEntry& e : batch) apps.push_back({e.seq, e.tokens});
      auto room = kv.reserve(apps);
      EXPECT_TRUE(room.ok() && room->fits());
      const Status st = fwd.run(batch, logits);
      EXPECT_TRUE(st.ok()) << st.message();
    };
    step({BatchEntry{b, prompt_b, false, &sb}});
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (with_a) {
      step({BatchEntry{a, prompt_a, false, &sa},
            BatchEntry{b, std::span<const int32_t>(&next, 1), false, &sb}});
      EXPECT_GT(sa.stats.prefill_dropped, 0);
      return std::vector<float>(logits.begin() + m->hp.n_vocab, logits.end());
    }
    step({BatchEntry{b, std::span<const int32_t>(&next, 1), false, &sb}});
    return logits;
  };
  const std::vector<float> alone = decode_b(false), mixed = decode_b(true);
  ASSERT_EQ(alone.size(), mixed.size());
  EXPECT_LT(max_abs_diff(alone, mixed), 1e-5f);
}

// An engine (the server's) started with rtpurbo as its default keeps only sinks + window on
// layers without a retrieval head, like the single-sequence path; a request whose policy
// reads more there is refused with a message, and rtpurbo requests run.
TEST(RtPurbo, EngineDefaultKeepsWindowLayersAndRefusesDenseRequests) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const std::string path = save_tmp(HeadPlan::empty(shape_of(*m)), "rt_engine_all_local.json");
  auto rt = make_policy(
      "rtpurbo", std::vector<std::string>{"head_plan=" + path, "rt_window=64", "rt_sinks=4"});
  ASSERT_TRUE(rt.ok()) << rt.message();
  auto make_engine = [&](PolicyPtr def) {
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.n_ctx = 1024;
    cfg.max_running = 2;
    cfg.default_policy = std::move(def);
    auto e = Engine::create(m, cfg);
    EXPECT_TRUE(e.ok()) << e.message();
    return std::move(e.value());
  };
  auto rt_engine = make_engine(std::make_shared<const PolicyConfig>(*rt));
  auto dense_engine = make_engine(std::make_shared<const PolicyConfig>(*make_policy("dense")));
  const KvStats a = rt_engine->kv_stats(), b = dense_engine->kv_stats();
  EXPECT_EQ(a.n_stream_full, 0);
  EXPECT_GT(a.n_stream_window, 0);
  EXPECT_EQ(b.bytes_per_token_full, b.token_bytes * b.n_stream_full);
  EXPECT_LT(int64_t{a.n_pages_total} * a.page_bytes, int64_t{b.n_pages_total} * b.page_bytes / 2);

  RequestParams p;
  p.prompt = prompt_of(*m, 200);
  p.max_tokens = 3;
  p.sampling.temperature = 0;
  p.stop_at_eog = false;
  std::mutex mu;
  std::map<RequestId, std::pair<FinishReason, std::string>> done;
  std::map<RequestId, int> tokens;
  auto cb = [&](const RequestEvent& ev) {
    std::lock_guard<std::mutex> l(mu);
    if (ev.token >= 0) tokens[ev.id]++;
    if (ev.finished) done[ev.id] = {ev.reason, ev.error};
  };
  const RequestId ok = rt_engine->submit(p, cb);
  p.policy = std::make_shared<const PolicyConfig>(*make_policy("dense"));
  const RequestId refused = rt_engine->submit(p, cb);
  ASSERT_TRUE(rt_engine->wait_idle(std::chrono::seconds(120)));
  EXPECT_EQ(done[ok].first, FinishReason::length);
  EXPECT_EQ(tokens[ok], 3);
  EXPECT_EQ(done[refused].first, FinishReason::error);
  EXPECT_NE(done[refused].second.find("window"), std::string::npos) << done[refused].second;
}

// KV heads whose query heads are all local keep only sinks + window even where their layer
// keeps another KV head whole: the store gets one stream per KV head, frees those heads'
// pages, and the outputs equal the same policy over a store that keeps every token.
TEST(RtPurbo, LocalKvHeadsOfMixedLayersKeepOnlyTheirWindow) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = prompt_of(*m, 720);
  HeadPlan mixed = identity_plan(*m);
  const int32_t G = m->hp.n_gqa();
  for (int32_t il = 0; il < m->hp.n_layer; ++il) {
    for (int32_t h = 0; h < m->hp.n_head; ++h)
      mixed.retrieval[int64_t{il} * m->hp.n_head + h] = h / G != 0;
  }
  const std::string path = save_tmp(mixed, "rt_kvhead_local.json");
  auto rt = make_policy("rtpurbo", std::vector<std::string>{"head_plan=" + path, "rt_window=64",
                                                            "rt_sinks=4", "top_p=0.9"});
  ASSERT_TRUE(rt.ok()) << rt.message();
  const std::vector<KvCapacity> layout = kv_layout_for(&*rt, m->hp);
  ASSERT_EQ(layout_groups(layout, m->hp), m->hp.n_head_kv);
  EXPECT_TRUE(layout_at(layout, m->hp, 0, 0).is_window());
  EXPECT_FALSE(layout_at(layout, m->hp, 0, 1).is_window());
  const std::vector<KvCapacity> whole = kv_layout_for(nullptr, m->hp);
  // The prompt in one chunk, then decode steps that drop the windowed heads' old pages. (A
  // chunked prefill reads a windowed stream in other tiles than a whole one; the last-bit
  // differences flip the int8 rounding of later matmuls' activations and grow to ~0.5 in the
  // logits, as any change of summation order does; the greedy tokens stay the same.)
  const Out per_head = run(*m, prompt, 1024, 4, &*rt, 2);
  const Out kept = run(*m, prompt, 1024, 4, &*rt, 2, &whole);
  ASSERT_EQ(per_head.logits.size(), kept.logits.size());
  for (size_t s = 0; s < kept.logits.size(); ++s) {
    EXPECT_LT(max_abs_diff(per_head.logits[s], kept.logits[s]), 1e-4f) << s;
  }
  EXPECT_EQ(per_head.stats.selected_tokens, kept.stats.selected_tokens);
  // One KV head in three holds ~70 of 724 tokens.
  EXPECT_LT(per_head.kv_bytes, kept.kv_bytes * 3 / 4);
  auto argmax = [](const std::vector<float>& l) {
    return std::max_element(l.begin(), l.end()) - l.begin();
  };
  const Out chunked = run(*m, prompt, 256, 4, &*rt, 2),
            chunked_kept = run(*m, prompt, 256, 4, &*rt, 2, &whole);
  for (size_t s = 0; s < chunked.logits.size(); ++s) {
    EXPECT_EQ(argmax(chunked.logits[s]), argmax(chunked_kept.logits[s])) << s;
  }
  const Out one = run(*m, prompt, 256, 4, &*rt, 1);
  for (size_t s = 0; s < one.logits.size(); ++s) ASSERT_EQ(one.logits[s], chunked.logits[s]) << s;
  // Such a store serves this plan's rtpurbo only.
  const Status dense = check_layout_compatible(*make_policy("dense"), m->hp, layout);
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.message().find("one stream per KV head"), std::string::npos) << dense.message();
  EXPECT_TRUE(check_layout_compatible(*rt, m->hp, layout).ok());
  // The server's engine takes the same layout from its default policy and serves it.
  EngineConfig cfg;
  cfg.threads = 2;
  cfg.n_ctx = 1024;
  cfg.max_running = 2;
  cfg.default_policy = std::make_shared<const PolicyConfig>(*rt);
  auto engine = Engine::create(m, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  RequestParams p;
  p.prompt = prompt;
  p.max_tokens = 4;
  p.sampling.temperature = 0;
  p.stop_at_eog = false;
  std::mutex mu;
  std::vector<int32_t> got;
  FinishReason reason{};
  auto cb = [&](const RequestEvent& ev) {
    std::lock_guard<std::mutex> l(mu);
    if (ev.token >= 0) got.push_back(ev.token);
    if (ev.finished) reason = ev.reason;
  };
  (*engine)->submit(p, cb);
  ASSERT_TRUE((*engine)->wait_idle(std::chrono::seconds(120)));
  EXPECT_EQ(reason, FinishReason::length);
  ASSERT_EQ(got.size(), 4u);
  for (size_t s = 0; s < got.size(); ++s) EXPECT_EQ(got[s], argmax(per_head.logits[s])) << s;
  // The same prompt again: its prefix comes from the cache, windowed KV heads included.
  const std::vector<int32_t> first = got;
  got.clear();
  (*engine)->submit(p, cb);
  ASSERT_TRUE((*engine)->wait_idle(std::chrono::seconds(120)));
  EXPECT_GT((*engine)->kv_stats().n_prefix_hit_tokens, 0);
  EXPECT_EQ(got, first);
}

}  // namespace
}  // namespace sieve

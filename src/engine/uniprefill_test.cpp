// UniPrefill inside the forward pass, on the real SmolLM2 model: p = 1 equals dense bitwise;
// dropped rows are never computed by later layers; every layer's stream holds exactly the
// tokens its layer computed (original positions, sinks and tail kept) and decode reads those
// per-layer lengths; drops are per request inside a mixed batch; chunked prefill selects per
// chunk among the chunk's own tokens; short prompts are not touched.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine_test_util.h"
#include "engine/forward.h"
#include "engine/kv_binding.h"
#include "engine/sparse_seq.h"

namespace sieve {
namespace {

std::vector<int32_t> prompt_of(const Model& m, int n_tokens, int salt) {
  std::string t = "Minutes of the harbour board. ";
  const char* words[] = {"lantern", "ferry", "granite", "signal",
                         "cargo",   "tide",  "beacon",  "rope"};
  for (int i = 0; static_cast<int>(m.tokenizer->encode(t, true, false).size()) < n_tokens; ++i) {
    t += std::string("Item ") + std::to_string(i + salt) + ": the " + words[(i + salt) % 8] +
         " costs " + std::to_string((i * 13 + salt) % 89) + " crowns. ";
  }
  t += "Question: what does the beacon cost?";
  auto ids = m.tokenizer->encode(t, true, false);
  ids.erase(ids.begin() + 1,
            ids.begin() + 1 + (static_cast<int>(ids.size()) - n_tokens));  // keep the question
  return ids;
}

PolicyConfig uniprefill(float p, std::vector<int32_t> layers) {
  PolicyConfig P = *make_policy("uniprefill");
  P.up_p = p;
  P.up_layers = std::move(layers);
  P.up_min_prompt = 0;
  P.up_block = 16;
  P.up_sinks = 16;
  P.up_tail = 32;
  P.up_queries = 32;
  return P;
}

// One store and forward; sequences are prefilled in chunks (together in one batch when
// several) and then decode greedily one token per step.
struct Rig {
  ThreadPool pool{2};
  KvStore kv;
  Forward fwd;
  explicit Rig(const Model& m)
      : kv([&] {
          KvConfig c = kv_config_for(m.hp, 0, 16, "test");
          c.budget_bytes = kv_budget_bytes(m.hp, 4096, 2, 16);
          return std::move(KvStore::create(c).value());
        }()),
        fwd(m, pool, kv) {}

  // Runs one step of (seq, tokens, sparse) entries; returns every entry's last-row logits.
  std::vector<float> step(std::vector<BatchEntry> batch) {
    std::vector<KvAppend> apps;
    for (const BatchEntry& e : batch) apps.push_back({e.seq, e.tokens});
    auto room = kv.reserve(apps);
    EXPECT_TRUE(room.ok() && room->fits());
    std::vector<float> logits;
    const Status st = fwd.run(batch, logits);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_TRUE(kv.check_invariants().ok());
    return logits;
  }
  KvSeqId add() { return kv.add_sequence({}).value().seq; }
};

int32_t argmax(std::span<const float> l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// Prefill of `prompt` in chunks of `chunk` plus n_decode greedy steps: the logits of each step.
std::vector<std::vector<float>> run_one(Rig& rig, const std::vector<int32_t>& prompt, int chunk,
                                        int n_decode, SparseSeq* sp, KvSeqId* seq_out = nullptr) {
  const KvSeqId seq = rig.add();
  std::vector<int32_t> toks = prompt;
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < prompt.size(); i += chunk) {
    const size_t n = std::min<size_t>(chunk, prompt.size() - i);
    out.push_back(
        rig.step({BatchEntry{seq, std::span<const int32_t>(prompt.data() + i, n), false, sp}}));
  }
  for (int g = 0; g < n_decode; ++g) {
    toks.push_back(argmax(out.back()));
    out.push_back(
        rig.step({BatchEntry{seq, std::span<const int32_t>(&toks.back(), 1), false, sp}}));
  }
  if (seq_out) *seq_out = seq;
  return out;
}

TEST(UniPrefill, PEqualOneEqualsDenseBitwise) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = prompt_of(*m, test_short_mode() ? 160 : 400, 0);
  Rig dense_rig(*m), up_rig(*m);
  const auto dense = run_one(dense_rig, prompt, static_cast<int>(prompt.size()), 3, nullptr);
  SparseSeq sp(uniprefill(1.0f, {2, 5, 9}), m->hp);
  const auto up = run_one(up_rig, prompt, static_cast<int>(prompt.size()), 3, &sp);
  ASSERT_EQ(dense.size(), up.size());
  for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(dense[s], up[s]) << "step " << s;
  EXPECT_EQ(sp.stats.prefill_selections, 3);
  EXPECT_EQ(sp.stats.prefill_dropped, 0);
  EXPECT_DOUBLE_EQ(sp.stats.prefill_row_fraction(), 1.0);
}

TEST(UniPrefill, DroppedRowsSkipLaterLayersAndDecodeReadsEachLayersLength) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const int n = test_short_mode() ? 200 : 480;
  const auto prompt = prompt_of(*m, n, 1);
  const std::vector<int32_t> layers = {2, 6};
  const PolicyConfig P = uniprefill(0.6f, layers);
  Rig rig(*m);
  SparseSeq sp(P, m->hp);
  KvSeqId seq = 0;
  run_one(rig, prompt, n, 0, &sp, &seq);
  const auto rows = rig.fwd.layer_rows();
  const int L = m->hp.n_layer;
  for (int il = 0; il <= layers[0]; ++il) EXPECT_EQ(rows[il], n) << il;
  const int64_t kept1 = rows[layers[0] + 1], kept2 = rows[layers[1] + 1];
  EXPECT_LT(kept1, n);
  EXPECT_LE(kept2, kept1);
  for (int il = layers[0] + 1; il <= layers[1]; ++il) EXPECT_EQ(rows[il], kept1) << il;
  for (int il = layers[1] + 1; il < L; ++il) EXPECT_EQ(rows[il], kept2) << il;
  EXPECT_EQ(sp.stats.prefill_dropped, n - kept2);
  EXPECT_EQ(sp.stats.prefill_rows, int64_t{layers[0] + 1} * n +
                                       int64_t{layers[1] - layers[0]} * kept1 +
                                       int64_t{L - 1 - layers[1]} * kept2);

  // Each stream holds exactly what its layer computed: the selection layer keeps every token
  // it rated; later layers the kept ones, at original positions, sinks and tail included.
  auto check_streams = [&](int extra) {
    for (int il = 0; il < L; ++il) {
      const KvSeqView v = rig.kv.seq_view(seq, il);
      const int64_t want = il <= layers[0] ? n : il <= layers[1] ? kept1 : kept2;
      ASSERT_EQ(v.n_tokens, want + extra) << "layer " << il;
      for (int32_t j = 1; j < v.n_tokens; ++j) ASSERT_LT(v.position(j - 1), v.position(j));
      for (int32_t j = 0; j < P.up_sinks; ++j) ASSERT_EQ(v.position(j), j);
      for (int32_t j = 0; j < P.up_tail + extra; ++j)
        ASSERT_EQ(v.position(v.n_tokens - 1 - j), n + extra - 1 - j);
    }
    // The kept set only shrinks: layer 7's positions are a subset of layer 3's.
    const KvSeqView a = rig.kv.seq_view(seq, layers[0] + 1),
                    b = rig.kv.seq_view(seq, layers[1] + 1);
    int32_t j = 0;
    for (int32_t k = 0; k < b.n_tokens; ++k) {
      while (j < a.n_tokens && a.position(j) < b.position(k)) ++j;
      ASSERT_LT(j, a.n_tokens);
      ASSERT_EQ(a.position(j), b.position(k));
    }
  };
  check_streams(0);

  // Decode: one row per layer, each attending to its own layer's stream.
  struct LenObserver : AttentionObserver {
    std::vector<int32_t> len;
    void on_layer(int layer, std::span<const BatchEntry> batch, const float*, const int32_t* pos,
                  const KvStore& kv) override {
      len.push_back(kv.seq_view(batch[0].seq, layer).n_tokens);
      EXPECT_EQ(pos[0], kv.n_tokens(batch[0].seq) - 1);  // the original position
    }
  } obs;
  rig.fwd.set_observer(&obs);
  const int32_t next = 42;
  rig.step({BatchEntry{seq, std::span<const int32_t>(&next, 1), false, &sp}});
  rig.fwd.set_observer(nullptr);
  ASSERT_EQ(static_cast<int>(obs.len.size()), L);
  for (int il = 0; il < L; ++il) {
    const int64_t want = il <= layers[0] ? n : il <= layers[1] ? kept1 : kept2;
    EXPECT_EQ(obs.len[il], want + 1) << il;
    EXPECT_EQ(rig.fwd.layer_rows()[il], 1);
  }
  check_streams(1);
}

TEST(UniPrefill, MixedBatchDropsPerRequest) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const int n = test_short_mode() ? 160 : 320;
  const auto pa = prompt_of(*m, n, 2), pb = prompt_of(*m, n + 40, 3);
  const PolicyConfig P = uniprefill(0.5f, {3});
  // Alone: a dense request and a dropping one.
  Rig solo(*m);
  const auto dense_alone = run_one(solo, pa, n, 0, nullptr);
  SparseSeq sp_alone(P, m->hp);
  const auto up_alone = run_one(solo, pb, n + 40, 0, &sp_alone);
  ASSERT_GT(sp_alone.stats.prefill_dropped, 0);
  // Together in one batch: each equals its solo run.
  Rig rig(*m);
  SparseSeq sp(P, m->hp);
  const KvSeqId a = rig.add(), b = rig.add();
  const auto both = rig.step({BatchEntry{a, pa, false, nullptr}, BatchEntry{b, pb, false, &sp}});
  const size_t V = m->hp.n_vocab;
  ASSERT_EQ(both.size(), 2 * V);
  EXPECT_TRUE(std::equal(both.begin(), both.begin() + V, dense_alone.back().begin()));
  EXPECT_TRUE(std::equal(both.begin() + V, both.end(), up_alone.back().begin()));
  EXPECT_EQ(sp.stats.prefill_dropped, sp_alone.stats.prefill_dropped);
  EXPECT_EQ(rig.kv.seq_view(a, m->hp.n_layer - 1).n_tokens, n);
  EXPECT_EQ(rig.kv.seq_view(b, m->hp.n_layer - 1).n_tokens, n + 40 - sp.stats.prefill_dropped);
}

TEST(UniPrefill, ChunkedPrefillSelectsAmongEachChunksOwnTokens) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const int n = test_short_mode() ? 240 : 480, chunk = n / 2;
  const auto prompt = prompt_of(*m, n, 4);
  PolicyConfig P = uniprefill(0.5f, {4});
  Rig rig(*m);
  SparseSeq sp(P, m->hp);
  const KvSeqId seq = rig.add();
  rig.step({BatchEntry{seq, std::span<const int32_t>(prompt.data(), chunk), false, &sp}});
  const int64_t kept_first = rig.fwd.layer_rows()[5];
  const int64_t dropped_first = sp.stats.prefill_dropped;
  EXPECT_EQ(kept_first + dropped_first, chunk);
  // The first chunk's tail is kept (its last rows scored it); the second chunk's rows see
  // the first chunk's kept tokens and only its own tokens can be dropped.
  rig.step(
      {BatchEntry{seq, std::span<const int32_t>(prompt.data() + chunk, n - chunk), false, &sp}});
  const int64_t kept_second = rig.fwd.layer_rows()[5];
  EXPECT_EQ(sp.stats.prefill_selections, 2);
  EXPECT_EQ(rig.kv.seq_view(seq, 4).n_tokens, n);
  const KvSeqView v = rig.kv.seq_view(seq, 5);
  EXPECT_EQ(v.n_tokens, kept_first + kept_second);
  int32_t first_chunk_tokens = 0;
  for (int32_t j = 0; j < v.n_tokens; ++j) first_chunk_tokens += v.position(j) < chunk;
  EXPECT_EQ(first_chunk_tokens, kept_first);
  for (int32_t j = 0; j < P.up_tail; ++j)
    EXPECT_EQ(v.position(first_chunk_tokens - 1 - j), chunk - 1 - j);
}

TEST(UniPrefill, ShortPromptsAndDecodeStepsRunDense) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  const auto prompt = prompt_of(*m, 120, 5);
  PolicyConfig P = uniprefill(0.3f, {3});
  P.up_min_prompt = 121;
  Rig dense_rig(*m), up_rig(*m);
  const auto dense = run_one(dense_rig, prompt, 120, 2, nullptr);
  SparseSeq sp(P, m->hp);
  const auto up = run_one(up_rig, prompt, 120, 2, &sp);
  for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(dense[s], up[s]) << "step " << s;
  EXPECT_EQ(sp.stats.prefill_selections, 0);
}

TEST(UniPrefill, LayerPlanIsValidatedAgainstTheModel) {
  auto m = test_smollm2();
  if (!m) GTEST_SKIP() << "smollm2.gguf not found";
  EXPECT_TRUE(check_uniprefill_layers(uniprefill(0.9f, {}), m->hp).ok());
  const Status bad = check_uniprefill_layers(uniprefill(0.9f, {3, 30}), m->hp);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("layer 30 does not exist"), std::string::npos) << bad.message();
  EXPECT_EQ(prefill_chunk_for(uniprefill(0.9f, {}), 5000, 512), 32768);
  PolicyConfig P = uniprefill(0.9f, {});
  P.up_min_prompt = 8000;
  EXPECT_EQ(prefill_chunk_for(P, 5000, 512), 512);
  EXPECT_EQ(prefill_chunk_for(*make_policy("tokenselect"), 50000, 512), 512);
}

}  // namespace
}  // namespace sieve

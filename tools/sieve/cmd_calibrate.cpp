// sieve calibrate: RTPurbo's offline steps (docs/calibrate.md).
//   1. Retrieval heads by the needle method: the same needle sentence early in long filler
//      and again at the very end; a query head's score is the attention mass the late copy's
//      tokens put on the early copy's span, averaged over the late tokens and the samples.
//      The top `ratio` of all query heads become retrieval heads (at least one).
//   2. --fit-indexer: for the retrieval heads, low-dim projections of pre-RoPE q and k fitted
//      to the full attention (src/sparse/indexer.h) on natural calibration text.
// Both read the model through an AttentionObserver (post-RoPE queries, the KV store), as
// sieve analyze does; keys are rotated back to pre-RoPE by the inverse rotation.
#include <openssl/evp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "backend/cpu/ops.h"
#include "calibrate_text.h"
#include "command.h"
#include "core/log.h"
#include "engine/forward.h"
#include "engine/kv_binding.h"
#include "progress.h"
#include "run_common.h"
#include "sparse/head_plan.h"
#include "sparse/indexer.h"
#include "sparse/sketch_basis.h"

namespace sieve::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct CalibrateOptions {
  ModelOptions model;
  std::string out, head_plan, dump_rows;
  float ratio = 0.15f;
  uint64_t seed = 1;
  int32_t samples = 4;
  int32_t ctx = 2048;
  int32_t chunk = 512;
  bool fit_indexer = false;
  int32_t d_idx = 0;
  int32_t steps = 200;
  int32_t queries = 128;  // per sample, for the fit
  float lr = 0.02f;
  float budget_p = -1;         // < 0: the rtpurbo preset's top_p; 0: no budget report
  int32_t budget_window = -1;  // < 0: ctx / 8
  bool sketch_basis = false;   // fit a PCA sketch basis instead of a head plan
  int32_t sketch_dim = 0;
  bool quiet = false;  // sieve -q: no progress bar
};

HeadShape shape_of(const ModelHParams& hp) {
  return HeadShape{hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim};
}

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

// Keys of one stream as f32 [n_head_kv, n, head_dim] (as attention reads them: f16).
void load_stream_keys(const KvSeqView& sv, const ModelHParams& hp, ThreadPool& pool,
                      std::vector<float>& kf, std::vector<int32_t>& kpos) {
  const int32_t n = sv.n_tokens, d = hp.head_dim, Hkv = hp.n_head_kv;
  kf.resize(static_cast<size_t>(Hkv) * n * d);
  kpos.resize(n);
  pool.parallel_for(n, 256, [&](int64_t a, int64_t z) {
    for (int64_t j = a; j < z; ++j) {
      const uint16_t* row = sv.k_f16(static_cast<int32_t>(j));
      kpos[j] = sv.position(static_cast<int32_t>(j));
      for (int32_t h = 0; h < Hkv; ++h)
        f16_to_f32_row(row + int64_t{h} * d, kf.data() + (int64_t{h} * n + j) * d, d);
    }
  });
}

// Runs one sequence through the model in chunks, the observer attached; progress in tokens.
class Prefiller {
 public:
  Prefiller(const Model& model, ThreadPool& pool, int32_t ctx, int32_t chunk)
      : model_(model), pool_(pool), chunk_(chunk) {
    const ModelHParams& hp = model.hp;
    int n_sliding = 0;
    for (LayerKind k : hp.layer_kind) n_sliding += k == LayerKind::sliding;
    ModelHParams one_layer = hp;
    one_layer.layer_kind.assign(1, LayerKind::full);
    const int64_t bytes =
        kv_budget_bytes(hp, ctx, 1, 16) + n_sliding * kv_budget_bytes(one_layer, chunk + 32, 1, 16);
    auto store = KvStore::create(kv_config_for(hp, bytes, 16, "calibrate"));
    if (!store) throw UserError(store.message());
    kv_ = std::make_unique<KvStore>(std::move(store.value()));
  }

  void run(const std::vector<int32_t>& ids, AttentionObserver& obs, Progress& bar) {
    Forward fwd(model_, pool_, *kv_);
    fwd.set_observer(&obs);
    auto added = kv_->add_sequence({});
    if (!added) throw UserError(added.message());
    const KvSeqId seq = added->seq;
    std::vector<float> logits;
    for (size_t i = 0; i < ids.size(); i += chunk_) {
      const size_t n = std::min<size_t>(chunk_, ids.size() - i);
      const std::span<const int32_t> t(ids.data() + i, n);
      const KvAppend app{seq, t};
      auto room = kv_->reserve(std::span<const KvAppend>(&app, 1));
      if (!room || !room->fits())
        throw UserError("the KV store has no room for the calibration text");
      const BatchEntry e{seq, t, false, nullptr};
      if (Status st = fwd.run(std::span<const BatchEntry>(&e, 1), logits); !st)
        throw UserError(st.message());
      bar.add(static_cast<int64_t>(n));
    }
    fwd.set_observer(nullptr);
    if (Status st = kv_->free_sequence(seq); !st) throw UserError(st.message());
  }

 private:
  const Model& model_;
  ThreadPool& pool_;
  int32_t chunk_;
  std::unique_ptr<KvStore> kv_;
};

// ---- step 1: retrieval scores ----

// Adds, per layer and query head, the mean over the late needle's tokens (its first token
// left out: it cannot know yet that a repeat is coming) of the softmax attention mass on the
// early needle's span, over exactly the keys the layer attends to (a sliding layer: its
// window, so a far early copy gets 0).
class NeedleScorer : public AttentionObserver {
 public:
  NeedleScorer(const ModelHParams& hp, ThreadPool& pool, std::vector<double>& score)
      : hp_(hp), pool_(pool), score_(score) {}
  NeedleSample sample;
  std::vector<std::vector<float>>
      rows;  // --dump-rows: [layer * n_head + head] a late query's attention

  void on_layer(int il, std::span<const BatchEntry> batch, const float* q, const int32_t* pos,
                const KvStore& kv) override {
    const int32_t n_tok = static_cast<int32_t>(batch[0].tokens.size());
    const int32_t first = sample.late_begin + 1, end = sample.late_begin + sample.needle_len;
    if (pos[n_tok - 1] < first) return;
    load_stream_keys(kv.seq_view(batch[0].seq, il), hp_, pool_, kf_, kpos_);
    const int32_t H = hp_.n_head, d = hp_.head_dim, G = hp_.n_gqa(),
                  n = static_cast<int32_t>(kpos_.size());
    const bool sliding = hp_.layer_kind[il] == LayerKind::sliding;
    const int32_t e0 = sample.early_begin, e1 = sample.early_begin + sample.needle_len;
    const double per_query = 1.0 / (sample.needle_len - 1);
    pool_.parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> lg(n);
      for (int64_t h = h0; h < h1; ++h) {
        for (int32_t t = 0; t < n_tok; ++t) {
          const int32_t p = pos[t];
          if (p < first || p >= end) continue;
          const float* qh = q + int64_t{t} * hp_.q_dim() + h * d;
          const float* kh = kf_.data() + (h / G) * int64_t{n} * d;
          float m = -INFINITY;
          for (int32_t j = 0; j < n; ++j) {
            const int32_t kp = kpos_[j];
            const bool seen = kp <= p && (!sliding || kp > p - hp_.sliding_window);
            lg[j] = seen ? hp_.attn_scale * dot_f32(qh, kh + int64_t{j} * d, d) : -INFINITY;
            m = std::max(m, lg[j]);
          }
          double sum = 0, on_needle = 0;
          for (int32_t j = 0; j < n; ++j) {
            if (lg[j] == -INFINITY) {
              lg[j] = 0;
              continue;
            }
            lg[j] = std::exp(lg[j] - m);
            sum += lg[j];
            if (kpos_[j] >= e0 && kpos_[j] < e1) on_needle += lg[j];
          }
          score_[static_cast<size_t>(il) * H + h] += per_query * on_needle / sum;
          if (!rows.empty() && p == end - 1 && !sliding) {
            std::vector<float>& r = rows[static_cast<size_t>(il) * H + h];
            r.resize(n);
            for (int32_t j = 0; j < n; ++j) r[j] = static_cast<float>(lg[j] / sum);
          }
        }
      }
    });
  }

 private:
  const ModelHParams& hp_;
  ThreadPool& pool_;
  std::vector<double>& score_;
  std::vector<float> kf_;
  std::vector<int32_t> kpos_;
};

HeadPlan calibrate_heads(const CalibrateOptions& o, const LoadedModel& lm,
                         const CalibrationCorpus& corpus) {
  const Model& model = *lm.model;
  const ModelHParams& hp = model.hp;
  std::vector<double> score(static_cast<size_t>(hp.n_layer) * hp.n_head, 0.0);
  NeedleScorer scorer(hp, *lm.pool, score);
  Prefiller pre(model, *lm.pool, o.ctx, o.chunk);
  const auto t0 = Clock::now();
  {
    Progress bar("calibrate: needle samples", int64_t{o.samples} * o.ctx, o.quiet);
    for (int32_t s = 0; s < o.samples; ++s) {
      scorer.sample = make_needle_sample(corpus, *model.tokenizer, o.ctx, o.seed, s);
      if (s == 0 && !o.dump_rows.empty()) scorer.rows.assign(score.size(), {});
      pre.run(scorer.sample.ids, scorer, bar);
      if (s == 0 && !o.dump_rows.empty()) {
        std::ofstream out(o.dump_rows);
        out << "# attention rows of the last late-needle query (sieve calibrate --dump-rows), seed "
            << o.seed << ": layer head n p_0 .. p_{n-1}\n";
        for (size_t i = 0; i < scorer.rows.size(); ++i) {
          if (scorer.rows[i].empty()) continue;
          out << i / hp.n_head << ' ' << i % hp.n_head << ' ' << scorer.rows[i].size();
          for (float v : scorer.rows[i]) out << ' ' << fmt::format("{}", v);
          out << '\n';
        }
        if (!out) throw UserError("cannot write " + o.dump_rows);
        scorer.rows.clear();
      }
    }
  }
  HeadPlan plan = HeadPlan::empty(shape_of(hp));
  for (size_t i = 0; i < score.size(); ++i)
    plan.scores[i] = static_cast<float>(score[i] / o.samples);
  choose_retrieval_heads(plan, o.ratio);
  plan.seed = o.seed;
  plan.samples = o.samples;
  plan.ctx = o.ctx;
  plan.model_name = hp.name;
  plan.model_arch = hp.arch;
  plan.model_sha256 = file_sha256(lm.path);
  plan.score_method =
      "needle: mean over the late copy's tokens (first left out) of the attention mass on the "
      "early copy's span";
  log_info("calibrate: {} samples of {} tokens in {:.1f} s", o.samples, o.ctx, seconds_since(t0));
  return plan;
}

void print_plan(const HeadPlan& plan, const ModelHParams& hp) {
  std::printf("layer  kind     retrieval heads (X)  n  max score\n");
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    std::string mask;
    float mx = 0;
    for (int32_t h = 0; h < hp.n_head; ++h) {
      mask += plan.is_retrieval(l, h) ? 'X' : '.';
      mx = std::max(mx, plan.score(l, h));
    }
    std::printf("%5d  %-7s  %-19s  %d  %.4f\n", l,
                hp.layer_kind[l] == LayerKind::sliding ? "sliding" : "full", mask.c_str(),
                plan.n_retrieval(l), mx);
  }
  std::printf("retrieval heads: %d of %d (%.1f%%); KV groups keeping full KV: %d of %d\n",
              plan.n_retrieval(), hp.n_layer * hp.n_head, 100.0 * plan.retrieval_share(),
              plan.n_kv_full(), hp.n_layer * hp.n_head_kv);
}

// ---- step 2: the indexer fit ----

// Collects, on full-attention layers with retrieval heads, the post-RoPE query rows at the
// sampled positions and, at the last chunk, the layer's keys.
class FitCollector : public AttentionObserver {
 public:
  FitCollector(const ModelHParams& hp, ThreadPool& pool, const std::vector<uint8_t>& wanted)
      : hp_(hp), pool_(pool), wanted_(wanted), layers_(hp.n_layer) {}
  struct Layer {
    std::vector<float> q;     // [n_q, q_dim] post-RoPE
    std::vector<float> keys;  // [n_head_kv, n, head_dim] post-RoPE
    std::vector<int32_t> kpos;
  };
  std::vector<int32_t> positions;  // sampled query positions, ascending
  int32_t n_total = 0;

  void reset() {
    for (Layer& L : layers_) L = Layer{};
  }
  const Layer& layer(int il) const { return layers_[il]; }

  void on_layer(int il, std::span<const BatchEntry> batch, const float* q, const int32_t* pos,
                const KvStore& kv) override {
    if (!wanted_[il]) return;
    Layer& L = layers_[il];
    const int32_t n_tok = static_cast<int32_t>(batch[0].tokens.size());
    for (int32_t t = 0; t < n_tok; ++t) {
      if (std::binary_search(positions.begin(), positions.end(), pos[t])) {
        L.q.insert(L.q.end(), q + int64_t{t} * hp_.q_dim(), q + int64_t{t + 1} * hp_.q_dim());
      }
    }
    if (pos[n_tok - 1] == n_total - 1)
      load_stream_keys(kv.seq_view(batch[0].seq, il), hp_, pool_, L.keys, L.kpos);
  }

 private:
  const ModelHParams& hp_;
  ThreadPool& pool_;
  const std::vector<uint8_t>& wanted_;
  std::vector<Layer> layers_;
};

// One KV group's fitting job: its layer, KV head and retrieval query heads.
struct FitGroup {
  int32_t layer = 0, kv_head = 0;
  std::vector<int32_t> heads;
  IndexerGroupData data;
};

// Turns one sample's collected rows into the group's IndexerSeq: keys and queries rotated
// back to pre-RoPE, targets = the model's softmax attention over keys [0, pos].
void add_sequence(FitGroup& g, const FitCollector& col, const ModelHParams& hp, ThreadPool& pool) {
  const FitCollector::Layer& L = col.layer(g.layer);
  const int32_t D = hp.head_dim, n = static_cast<int32_t>(L.kpos.size()),
                n_q = static_cast<int32_t>(col.positions.size());
  const float base = hp.rope_base[g.layer];
  IndexerSeq S;
  S.n_keys = n;
  const float* kpost = L.keys.data() + int64_t{g.kv_head} * n * D;
  S.keys.assign(kpost, kpost + int64_t{n} * D);
  std::vector<int32_t> neg(n);
  for (int32_t j = 0; j < n; ++j) neg[j] = -L.kpos[j];
  rope(S.keys.data(), neg.data(), n, 1, D, hp.n_rot, base, hp.rope_mode, hp.rope_scaling);
  S.n_q = n_q;
  const int32_t A = static_cast<int32_t>(g.heads.size());
  S.queries.resize(static_cast<size_t>(A) * n_q * D);
  int64_t total = 0;
  for (int32_t i = 0; i < n_q; ++i) {
    S.q_len.push_back(col.positions[i] + 1);
    S.held_out.push_back(i % 4 == 3);
    total += col.positions[i] + 1;
  }
  S.target.resize(static_cast<size_t>(A) * total);
  std::vector<int64_t> off(n_q + 1, 0);
  for (int32_t i = 0; i < n_q; ++i) off[i + 1] = off[i] + S.q_len[i];
  pool.parallel_for(int64_t{A} * n_q, 4, [&](int64_t a0, int64_t a1) {
    for (int64_t it = a0; it < a1; ++it) {
      const int32_t a = static_cast<int32_t>(it / n_q), i = static_cast<int32_t>(it % n_q);
      const float* qpost = L.q.data() + int64_t{i} * hp.q_dim() + int64_t{g.heads[a]} * D;
      float* qpre = S.queries.data() + (int64_t{a} * n_q + i) * D;
      std::copy(qpost, qpost + D, qpre);
      const int32_t np = -col.positions[i];
      rope(qpre, &np, 1, 1, D, hp.n_rot, base, hp.rope_mode, hp.rope_scaling);
      float* p = S.target.data() + a * total + off[i];
      const int32_t len = S.q_len[i];
      float m = -INFINITY;
      for (int32_t j = 0; j < len; ++j) {
        p[j] = hp.attn_scale * dot_f32(qpost, kpost + int64_t{j} * D, D);
        m = std::max(m, p[j]);
      }
      double sum = 0;
      for (int32_t j = 0; j < len; ++j) sum += p[j] = std::exp(p[j] - m);
      const float inv = static_cast<float>(1.0 / sum);
      for (int32_t j = 0; j < len; ++j) p[j] *= inv;
    }
  });
  g.data.seqs.push_back(std::move(S));
}

void fit_indexers(HeadPlan& plan, const CalibrateOptions& o, const LoadedModel& lm,
                  const CalibrationCorpus& corpus) {
  const Model& model = *lm.model;
  const ModelHParams& hp = model.hp;
  std::vector<FitGroup> groups;
  std::vector<uint8_t> wanted(hp.n_layer, 0);
  int32_t skipped_sliding = 0;
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    for (int32_t g = 0; g < hp.n_head_kv; ++g) {
      FitGroup fg;
      fg.layer = l;
      fg.kv_head = g;
      for (int32_t h = g * hp.n_gqa(); h < (g + 1) * hp.n_gqa(); ++h) {
        if (plan.is_retrieval(l, h)) fg.heads.push_back(h);
      }
      if (fg.heads.empty()) continue;
      if (hp.layer_kind[l] == LayerKind::sliding) {
        skipped_sliding += static_cast<int32_t>(fg.heads.size());
        continue;
      }
      fg.data.head_dim = hp.head_dim;
      fg.data.n_heads = static_cast<int32_t>(fg.heads.size());
      wanted[l] = 1;
      groups.push_back(std::move(fg));
    }
  }
  if (skipped_sliding > 0) {
    std::printf(
        "indexer: %d retrieval heads on sliding-window layers get no indexer (they read their "
        "window)\n",
        skipped_sliding);
  }
  if (groups.empty())
    throw UserError("the head plan has no retrieval head on a full-attention layer to fit");

  const int32_t lo = o.ctx / 2;
  if (o.ctx - lo < o.queries)
    throw UserError("--queries exceeds the positions in the second half of --ctx");
  const auto t0 = Clock::now();
  FitCollector col(hp, *lm.pool, wanted);
  Prefiller pre(model, *lm.pool, o.ctx, o.chunk);
  {
    Progress bar("calibrate: indexer text", int64_t{o.samples} * o.ctx, o.quiet);
    for (int32_t s = 0; s < o.samples; ++s) {
      const std::vector<int32_t> ids = make_fit_text(corpus, *model.tokenizer, o.ctx, o.seed, s);
      // Query positions: distinct, uniform over the second half (long attention spans).
      SplitMix rng{o.seed * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(s) + 7};
      std::vector<int32_t> all(o.ctx - lo);
      for (int32_t i = 0; i < o.ctx - lo; ++i) all[i] = lo + i;
      for (int32_t i = 0; i < o.queries; ++i) std::swap(all[i], all[i + rng.below(all.size() - i)]);
      col.positions.assign(all.begin(), all.begin() + o.queries);
      std::sort(col.positions.begin(), col.positions.end());
      col.n_total = static_cast<int32_t>(ids.size());
      col.reset();
      pre.run(ids, col, bar);
      for (FitGroup& g : groups) add_sequence(g, col, hp, *lm.pool);
    }
  }
  const double collect_s = seconds_since(t0);

  IndexerFitOptions fo;
  fo.d_idx = o.d_idx > 0 ? o.d_idx : std::max(1, hp.head_dim / 8);
  fo.steps = o.steps;
  fo.lr = o.lr;
  fo.scale = hp.attn_scale;
  fo.seed = o.seed;
  {
    const PolicyConfig rt = make_policy("rtpurbo").value();
    fo.budget_p = o.budget_p < 0 ? rt.top_p : o.budget_p;
    fo.budget_sinks = rt.rt_sinks;
    fo.budget_min_keep = rt.min_keep;
    fo.budget_window = o.budget_window < 0 ? o.ctx / 8 : o.budget_window;
  }
  plan.d_idx = fo.d_idx;
  plan.recall_k = fo.recall_k;
  plan.recall_of = fo.recall_of;
  plan.w_q.assign(static_cast<size_t>(hp.n_layer) * hp.n_head, {});
  plan.w_k.assign(static_cast<size_t>(hp.n_layer) * hp.n_head_kv, {});
  plan.fit.assign(plan.w_q.size(), IndexerFit{});
  const auto t1 = Clock::now();
  std::printf(
      "indexer: d_idx %d, %d Adam steps, %d x %d query positions (every 4th held out), recall = "
      "full top-%d in "
      "indexer top-%d\n",
      fo.d_idx, fo.steps, o.samples, o.queries, fo.recall_k, fo.recall_of);
  if (fo.budget_p > 0) {
    std::printf(
        "budget: share of the candidates (not the first %d nor the last %d keys) that top-p %.2f "
        "keeps over the "
        "indexer and over the full attention, and the attention mass the indexer's set holds\n",
        fo.budget_sinks, fo.budget_window, fo.budget_p);
  }
  std::printf(
      "layer  head  kv   held-out KL init -> fit          recall init -> fit   (JL sketch: KL, "
      "recall)%s\n",
      fo.budget_p > 0 ? "   keep  attention's keep  mass held" : "");
  double sums[6] = {}, budget_sums[3] = {};
  int32_t budget_heads = 0;  // heads with queries of at least 64 candidates
  int32_t n_heads = 0;
  {
    Progress bar("calibrate: indexer fit", static_cast<int64_t>(groups.size()), o.quiet);
    for (FitGroup& g : groups) {
      const IndexerGroupFit fit = fit_indexer(g.data, fo, *lm.pool);
      IndexerFitOptions ro = fo;
      ro.init = IndexerInit::random;
      std::vector<float> rk;
      std::vector<std::vector<float>> rq;
      indexer_init(g.data, ro, fo.d_idx, rk, rq);
      const IndexerEval jl = evaluate_indexer(g.data, ro, fo.d_idx, rk, rq, true, *lm.pool);
      plan.w_k[static_cast<size_t>(g.layer) * hp.n_head_kv + g.kv_head] = fit.w_k;
      for (size_t a = 0; a < g.heads.size(); ++a) {
        const IndexerHeadFit& h = fit.heads[a];
        const size_t i = static_cast<size_t>(g.layer) * hp.n_head + g.heads[a];
        plan.w_q[i] = h.w_q;
        plan.fit[i] = IndexerFit{h.kl_init, h.kl_fit,      h.recall_init, h.recall_fit,
                                 h.keep,    h.keep_oracle, h.coverage};
        std::printf(
            "%5d  %4d  %2d   %7.3f -> %6.3f  (train %6.3f)  %5.3f -> %5.3f         (%6.3f, %5.3f)",
            g.layer, g.heads[a], g.kv_head, h.kl_init, h.kl_fit, h.train_kl_fit, h.recall_init,
            h.recall_fit, jl.kl[a], jl.recall[a]);
        if (fo.budget_p > 0) {
          std::printf("   %4.2f  %4.2f              %4.2f", h.keep, h.keep_oracle, h.coverage);
          if (h.keep > 0) {
            budget_sums[0] += h.keep;
            budget_sums[1] += h.keep_oracle;
            budget_sums[2] += h.coverage;
            ++budget_heads;
          }
        }
        std::printf("\n");
        const double v[6] = {h.kl_init,    h.kl_fit, h.recall_init,
                             h.recall_fit, jl.kl[a], jl.recall[a]};
        for (int k = 0; k < 6; ++k) sums[k] += v[k];
        ++n_heads;
      }
      g.data = IndexerGroupData{};  // free the group's calibration data
      bar.add(1);
    }
  }
  plan.fit_ms = seconds_since(t1) * 1000.0;
  for (double& s : sums) s /= std::max(n_heads, 1);
  std::printf(
      "mean over %d heads: KL %.3f -> %.3f, recall %.3f -> %.3f (JL sketch: KL %.3f, recall %.3f); "
      "collect %.1f s, fit %.1f s\n",
      n_heads, sums[0], sums[1], sums[2], sums[3], sums[4], sums[5], collect_s,
      plan.fit_ms / 1000.0);
  if (fo.budget_p > 0) {
    for (double& s : budget_sums) s /= std::max(budget_heads, 1);
    std::printf(
        "budget (held-out): top-p %.2f keeps %.1f%% of the candidates over the indexer, %.1f%% "
        "over the full "
        "attention; the indexer's set holds %.3f of the attention's mass\n",
        fo.budget_p, 100 * budget_sums[0], 100 * budget_sums[1], budget_sums[2]);
  }
}

// ---- PCA sketch basis ----

// Adds, at the last chunk of a calibration text, every post-RoPE key of each full-attention
// layer (as the store keeps them: f16) to the second moments.
class KeyMomentCollector : public AttentionObserver {
 public:
  KeyMomentCollector(const ModelHParams& hp, ThreadPool& pool, KeyMoments& m)
      : hp_(hp), pool_(pool), m_(m) {}
  int32_t n_total = 0;
  void on_layer(int il, std::span<const BatchEntry> batch, const float* /*q*/, const int32_t* pos,
                const KvStore& kv) override {
    if (hp_.layer_kind[il] != LayerKind::full) return;
    const int32_t n_tok = static_cast<int32_t>(batch[0].tokens.size());
    if (pos[n_tok - 1] != n_total - 1) return;
    load_stream_keys(kv.seq_view(batch[0].seq, il), hp_, pool_, kf_, kpos_);
    const int32_t n = static_cast<int32_t>(kpos_.size());
    for (int32_t h = 0; h < hp_.n_head_kv; ++h)
      m_.add(il, h, kf_.data() + int64_t{h} * n * hp_.head_dim, n);
  }

 private:
  const ModelHParams& hp_;
  ThreadPool& pool_;
  KeyMoments& m_;
  std::vector<float> kf_;
  std::vector<int32_t> kpos_;
};

void fit_sketch_basis(const CalibrateOptions& o, const LoadedModel& lm,
                      const CalibrationCorpus& corpus) {
  const Model& model = *lm.model;
  const ModelHParams& hp = model.hp;
  const int32_t dim = o.sketch_dim > 0 ? o.sketch_dim : std::max(1, hp.head_dim / 8);
  if (dim > hp.head_dim) {
    throw UserError("--sketch-dim " + std::to_string(dim) + " exceeds head_dim " +
                    std::to_string(hp.head_dim));
  }
  const auto t0 = Clock::now();
  KeyMoments moments(hp.n_layer, hp.n_head_kv, hp.head_dim);
  KeyMomentCollector col(hp, *lm.pool, moments);
  Prefiller pre(model, *lm.pool, o.ctx, o.chunk);
  {
    Progress bar("calibrate: sketch basis text", int64_t{o.samples} * o.ctx, o.quiet);
    for (int32_t s = 0; s < o.samples; ++s) {
      const std::vector<int32_t> ids = make_fit_text(corpus, *model.tokenizer, o.ctx, o.seed, s);
      col.n_total = static_cast<int32_t>(ids.size());
      pre.run(ids, col, bar);
    }
  }
  SketchBasis b = moments.fit(dim);
  b.model_name = hp.name;
  b.model_arch = hp.arch;
  std::printf(
      "sketch basis: d_s %d of head_dim %d, %lld keys per (layer, KV head) from %d texts of %d "
      "tokens\n",
      dim, hp.head_dim, static_cast<long long>(b.tokens), o.samples, o.ctx);
  std::printf("layer  kv head  share of E|k|^2 in the span\n");
  double sum = 0;
  int32_t n = 0;
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    if (!b.fitted[l]) continue;
    for (int32_t h = 0; h < hp.n_head_kv; ++h) {
      const double c = b.captured[static_cast<size_t>(l) * hp.n_head_kv + h];
      std::printf("%5d  %7d  %.3f\n", l, h, c);
      sum += c;
      ++n;
    }
  }
  std::printf(
      "mean %.3f over %d (layer, KV head) pairs (a random %d-dim subspace keeps %.3f on isotropic "
      "keys)\n",
      sum / std::max(n, 1), n, dim, static_cast<double>(dim) / hp.head_dim);
  if (Status st = save_sketch_basis(b, o.out); !st) throw UserError(st.message());
  std::printf("wrote %s (%.1f s, %d threads)\n", o.out.c_str(), seconds_since(t0), lm.pool->size());
}

void check_options(const CalibrateOptions& o, const LoadedModel& lm) {
  if (o.out.empty()) throw UserError("--out FILE is required (where the head plan is written)");
  if (o.ctx > lm.n_ctx) {
    throw UserError("--ctx " + std::to_string(o.ctx) + " exceeds the context of " +
                    std::to_string(lm.n_ctx) + " tokens (raise -c)");
  }
  const ModelHParams& hp = lm.model->hp;
  int n_full = 0;
  for (LayerKind k : hp.layer_kind) n_full += k == LayerKind::full;
  if (n_full == 0) throw UserError("the model has no full-attention layer");
}

int calibrate(CalibrateOptions o) {
  o.quiet = log_level() > LogLevel::info;
  if (o.out.empty()) throw UserError("--out FILE is required (where the head plan is written)");
  if (!o.head_plan.empty() && !o.fit_indexer)
    throw UserError("--head-plan is read only with --fit-indexer");
  if ((o.budget_p >= 0 || o.budget_window >= 0) && !o.fit_indexer) {
    throw UserError("--budget-p and --budget-window are read only with --fit-indexer");
  }
  if (o.sketch_basis && (o.fit_indexer || !o.head_plan.empty())) {
    throw UserError(
        "--sketch-basis fits a PCA sketch basis on its own; leave out --fit-indexer and "
        "--head-plan");
  }
  LoadedModel lm = load_for_run(o.model);
  check_options(o, lm);
  const ModelHParams& hp = lm.model->hp;
  const CalibrationCorpus corpus = load_calibration_corpus();
  if (o.sketch_basis) {
    fit_sketch_basis(o, lm, corpus);
    return 0;
  }
  const auto t0 = Clock::now();
  HeadPlan plan;
  if (!o.head_plan.empty()) {
    const HeadShape shape = shape_of(hp);
    auto loaded = load_head_plan(o.head_plan, &shape);
    if (!loaded) throw UserError(loaded.message());
    plan = std::move(loaded.value());
  } else {
    plan = calibrate_heads(o, lm, corpus);
  }
  print_plan(plan, hp);
  if (o.fit_indexer) fit_indexers(plan, o, lm, corpus);
  if (Status st = save_head_plan(plan, o.out); !st) throw UserError(st.message());
  std::printf("wrote %s (%.1f s, %d threads)\n", o.out.c_str(), seconds_since(t0), lm.pool->size());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  add_model_flags(app, o->model);
  app.add_option("--out", o->out, "head plan JSON to write (with --sketch-basis: the basis JSON)")
      ->required();
  app.add_option("--ratio", o->ratio, "share of query heads made retrieval heads (at least one)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", o->seed, "seed of the calibration samples");
  app.add_option("--samples", o->samples,
                 "calibration sequences (needle samples; texts for the indexer fit)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--ctx", o->ctx, "tokens per calibration sequence")
      ->check(CLI::Range(256, 1 << 20));
  app.add_option("--chunk", o->chunk, "prefill chunk size in tokens")
      ->check(CLI::Range(16, 1 << 16));
  app.add_flag("--fit-indexer", o->fit_indexer,
               "fit the retrieval heads' low-dim indexer (stage 1 of RTPurbo)");
  app.add_option("--head-plan", o->head_plan,
                 "with --fit-indexer: the head plan to fit (default: calibrate first)");
  app.add_option("--d-idx", o->d_idx, "indexer dimension (default head_dim / 8)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--steps", o->steps, "Adam steps of the indexer fit")
      ->check(CLI::Range(0, 100000));
  app.add_option("--queries", o->queries,
                 "query positions per sequence for the fit (every 4th held out)")
      ->check(CLI::Range(4, 1 << 20));
  app.add_option("--lr", o->lr, "Adam step size of the indexer fit")->check(CLI::Range(1e-6, 10.0));
  app.add_option("--budget-p", o->budget_p,
                 "with --fit-indexer: report the top-p budget at this p on the held-out queries, "
                 "over the indexer and "
                 "over the full attention (default: the rtpurbo preset's top_p; 0: no report)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--budget-window", o->budget_window,
                 "with --fit-indexer: the recent keys left out of the budget's candidates (default "
                 "ctx / 8)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--sketch-basis", o->sketch_basis,
               "fit a PCA sketch basis (top --sketch-dim eigenvectors of the post-RoPE keys per "
               "layer and KV head) "
               "for the sketch preset's sketch_basis knob, instead of a head plan");
  app.add_option("--sketch-dim", o->sketch_dim, "with --sketch-basis: d_s (default head_dim / 8)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--dump-rows", o->dump_rows,
                 "write the first sample's last late-needle attention rows (full layers) to this "
                 "file (test fixtures)");
  return [o]() { return calibrate(*o); };
}

SIEVE_COMMAND(
    "calibrate",
    "RTPurbo head calibration: retrieval heads by the needle method (--out heads.json), and "
    "--fit-indexer: low-dim projections of their pre-RoPE q/k fitted to full attention",
    setup);

}  // namespace
}  // namespace sieve::cli

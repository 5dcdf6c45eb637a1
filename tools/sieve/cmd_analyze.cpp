// sieve analyze: attention diagnostics for one prompt (docs/analyze.md). Runs the prompt
// densely, then greedy decode steps; an AttentionObserver sees every full-attention layer's
// post-RoPE queries and computes, for the last prompt token and each decode query, the true
// attention over all keys and what each selection method would have kept of it
// (src/sparse/analysis.h), plus the statistics behind TokenSelect's observations.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "analyze_report.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "command.h"
#include "core/log.h"
#include "engine/engine_generate.h"
#include "engine/forward.h"
#include "engine/kv_binding.h"
#include "engine/sparse_seq.h"
#include "run_common.h"
#include "sparse/analysis.h"
#include "sparse/head_plan.h"
#include "sparse/policy.h"
#include "sparse/select.h"
#include "sparse/sketch.h"

namespace sieve::cli {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct AnalyzeOptions {
  ModelOptions model;
  std::string prompt, file;
  bool chat = false;
  int32_t n_decode = 8;
  std::vector<int32_t> budgets = {kDefaultBudget};
  int32_t sinks = -1, local = -1;
  int32_t recall_k = 1000;
  std::vector<int32_t> blocks = {1, 8, 16, 64, 128};
  int32_t h2o_history = 128;
  int32_t sketch_dim = 0;
  std::string sketch_basis;
  int32_t chunk = 512;
  std::vector<double> masses = {0.9, 0.95};  // top-p budget of the true attention
  int32_t exclude_sinks = 4, exclude_window = 2048;
  std::string head_plan;
  bool json = false;
  std::string out;
};

// What the observer needs to know about the run.
struct AnalyzePlan {
  int32_t n_prompt = 0;    // the last prompt token (position n_prompt - 1) is the first query
  int32_t n_total = 0;     // prompt + decode tokens
  int32_t hist_begin = 0;  // first position whose attention seeds the h2o history
  std::vector<BudgetSplit> budgets;
  int32_t recall_k = 0;
  std::vector<int32_t> blocks;
  float theta = 0.9f;
  std::vector<double> masses;  // top-p budget: masses, and the keys left out of the middle
  int32_t exclude_sinks = 0, exclude_window = 0;
};

// Per analysed layer, carried from query to query.
struct LayerState {
  std::vector<float> history;  // [n_total] true attention of earlier queries, summed over heads
  bool have_history = false;
  std::vector<float> sketch_k;  // [n_head_kv, n_total, ds] sketch keys, filled up to n_sketched
  int32_t n_sketched = 0;
  std::vector<float> prev_raw, prev_rot, prev_fp;  // the previous analysed query
};

class Analyzer : public AttentionObserver {
 public:
  Analyzer(const ModelHParams& hp, ThreadPool& pool, const AnalyzePlan& plan,
           const SketchProjection& sketch, AnalyzeRun& run)
      : hp_(hp), pool_(pool), plan_(plan), sketch_(sketch), run_(run) {
    slot_.assign(hp.n_layer, -1);
    for (int il = 0; il < hp.n_layer; ++il) {
      if (hp.layer_kind[il] != LayerKind::full) continue;
      slot_[il] = static_cast<int32_t>(run.layers.size());
      run.layers.push_back(il);
    }
    layers_.resize(run.layers.size());
    const int32_t ds = sketch.spec().dim;
    for (LayerState& L : layers_) {
      L.history.assign(plan.n_total, 0.0f);
      L.sketch_k.resize(static_cast<size_t>(hp.n_head_kv) * plan.n_total * ds);
    }
  }

  double busy_ms = 0;

  void on_layer(int il, std::span<const BatchEntry> batch, const float* q, const int32_t* pos,
                const KvStore& kv) override {
    if (slot_[il] < 0 || batch.size() != 1) return;
    const int32_t n_tok = static_cast<int32_t>(batch[0].tokens.size());
    if (pos[n_tok - 1] < plan_.hist_begin) return;
    const auto t0 = Clock::now();
    const KvSeqView sv = kv.seq_view(batch[0].seq, il);
    const int32_t n_keys = sv.n_tokens;
    SIEVE_ASSERT(n_keys == pos[n_tok - 1] + 1);  // no eviction: index == position
    load_keys(sv, n_keys);
    LayerState& L = layers_[slot_[il]];
    // Rows that only seed the h2o history (the prompt queries before the last): one parallel
    // region over (row, head) items, each thread summing into its own accumulator.
    std::vector<int32_t> hist_rows;
    for (int32_t t = 0; t < n_tok; ++t) {
      if (pos[t] >= plan_.hist_begin && pos[t] < plan_.n_prompt - 1) hist_rows.push_back(t);
    }
    if (!hist_rows.empty()) {
      const int32_t H = hp_.n_head, d = hp_.head_dim, G = hp_.n_gqa(), nt = pool_.size();
      const int64_t n_items = static_cast<int64_t>(hist_rows.size()) * H;
      acc_.assign(static_cast<size_t>(nt) * n_keys, 0.0f);
      pool_.run([&](int th, int n_th) {
        std::vector<float> row(n_keys);
        float* acc = acc_.data() + int64_t{th} * n_keys;
        for (int64_t i = n_items * th / n_th; i < n_items * (th + 1) / n_th; ++i) {
          const int32_t t = hist_rows[i / H], h = static_cast<int32_t>(i % H), n = pos[t] + 1;
          const float* qh = q + int64_t{t} * hp_.q_dim() + int64_t{h} * d;
          float m = -INFINITY;
          for (int32_t j = 0; j < n; ++j) {
            row[j] = hp_.attn_scale * dot_f32(qh, key(h / G, j), d);
            m = std::max(m, row[j]);
          }
          const float inv = static_cast<float>(1.0 / exp_shift_sum(row.data(), n, m));
          for (int32_t j = 0; j < n; ++j) acc[j] += row[j] * inv;
        }
      });
      for (int32_t th = 0; th < nt; ++th) {
        const float* acc = acc_.data() + int64_t{th} * n_keys;
        for (int32_t j = 0; j < n_keys; ++j) L.history[j] += acc[j];
      }
      L.have_history = true;
    }
    for (int32_t t = 0; t < n_tok; ++t) {
      const int32_t p = pos[t];
      if (p < plan_.n_prompt - 1) continue;
      const float* qt = q + int64_t{t} * hp_.q_dim();
      true_attention(qt, p + 1);
      analyse(il, qt, p);
      // Sum over heads: what H2O accumulates as the token's importance.
      for (int32_t h = 0; h < hp_.n_head; ++h) {
        const float* pr = prob_.data() + int64_t{h} * (p + 1);
        for (int32_t j = 0; j <= p; ++j) L.history[j] += pr[j];
      }
      L.have_history = true;
    }
    busy_ms += ms_since(t0);
  }

 private:
  // kf_ [n_head_kv, n, head_dim] f32 copy of the layer's keys (as attention reads them: f16).
  void load_keys(const KvSeqView& sv, int32_t n) {
    const int32_t d = hp_.head_dim, Hkv = hp_.n_head_kv;
    n_loaded_ = n;
    kf_.resize(static_cast<size_t>(Hkv) * n * d);
    pool_.parallel_for(n, 512, [&](int64_t a, int64_t z) {
      for (int64_t j = a; j < z; ++j) {
        const uint16_t* row = sv.k_f16(static_cast<int32_t>(j));
        for (int32_t h = 0; h < Hkv; ++h) {
          f16_to_f32_row(row + int64_t{h} * d, kf_.data() + (int64_t{h} * n + j) * d, d);
        }
      }
    });
  }
  const float* key(int32_t kv_head, int32_t j) const {
    return kf_.data() + (int64_t{kv_head} * n_loaded_ + j) * hp_.head_dim;
  }

  // logits_ [n_head, n] raw q.k and prob_ [n_head, n] softmax(scale * q.k) over keys [0, n).
  void true_attention(const float* q, int32_t n) {
    const int32_t H = hp_.n_head, d = hp_.head_dim, G = hp_.n_gqa();
    logits_.resize(static_cast<size_t>(H) * n);
    prob_.resize(logits_.size());
    pool_.parallel_for(H, 1, [&](int64_t a, int64_t z) {
      for (int64_t h = a; h < z; ++h) {
        const float* qh = q + h * d;
        float* lg = logits_.data() + h * n;
        float* pr = prob_.data() + h * n;
        float m = -INFINITY;
        for (int32_t j = 0; j < n; ++j) {
          lg[j] = dot_f32(qh, key(static_cast<int32_t>(h / G), j), d);
          pr[j] = hp_.attn_scale * lg[j];
          m = std::max(m, pr[j]);
        }
        const double sum = exp_shift_sum(pr, n, m);
        const float inv = static_cast<float>(1.0 / sum);
        for (int32_t j = 0; j < n; ++j) pr[j] *= inv;
      }
    });
  }

  // Sketch logits (qP).(KP) for keys [0, n), extending the layer's sketch keys first.
  void sketch_logits(int il, LayerState& L, const float* q, int32_t n) {
    const int32_t H = hp_.n_head, Hkv = hp_.n_head_kv, d = hp_.head_dim, G = hp_.n_gqa();
    const int32_t ds = sketch_.spec().dim, cap = plan_.n_total;
    if (L.n_sketched < n) {
      const int32_t from = L.n_sketched;
      pool_.parallel_for(n - from, 256, [&](int64_t a, int64_t z) {
        for (int64_t j = from + a; j < from + z; ++j) {
          for (int32_t h = 0; h < Hkv; ++h) {
            sketch_.project(key(h, static_cast<int32_t>(j)), il, h,
                            L.sketch_k.data() + (int64_t{h} * cap + j) * ds);
          }
        }
      });
      L.n_sketched = n;
    }
    std::vector<float> qs(static_cast<size_t>(H) * ds);
    for (int32_t h = 0; h < H; ++h)
      sketch_.project(q + int64_t{h} * d, il, h / G, qs.data() + int64_t{h} * ds);
    sk_logits_.resize(static_cast<size_t>(H) * n);
    for (int32_t h = 0; h < H; ++h) {  // d_s-wide dots: cheaper than a parallel region
      const float* sk = L.sketch_k.data() + int64_t{h / G} * cap * ds;
      const float* qh = qs.data() + int64_t{h} * ds;
      float* out = sk_logits_.data() + int64_t{h} * n;
      for (int32_t j = 0; j < n; ++j) {
        const float* kj = sk + int64_t{j} * ds;
        float acc = 0;
        for (int32_t c = 0; c < ds; ++c) acc += qh[c] * kj[c];
        out[j] = acc;
      }
    }
  }

  // Quest bounds [n_head, ceil(n / 16)] from the blocks' min/max keys.
  void quest_bounds(const float* q, int32_t n) {
    const int32_t H = hp_.n_head, Hkv = hp_.n_head_kv, d = hp_.head_dim, G = hp_.n_gqa();
    const int32_t B = run_.quest_block, nb = (n + B - 1) / B;
    bmin_.resize(static_cast<size_t>(Hkv) * nb * d);
    bmax_.resize(bmin_.size());
    for (int32_t h = 0; h < Hkv; ++h) {
      block_min_max(key(h, 0), n, d, B, bmin_.data() + int64_t{h} * nb * d,
                    bmax_.data() + int64_t{h} * nb * d);
    }
    bound_.resize(static_cast<size_t>(H) * nb);
    for (int32_t h = 0; h < H; ++h) {
      const int64_t base = int64_t{h / G} * nb * d;
      for (int32_t b = 0; b < nb; ++b) {
        bound_[int64_t{h} * nb + b] =
            quest_bound(q + int64_t{h} * d, bmin_.data() + base + int64_t{b} * d,
                        bmax_.data() + base + int64_t{b} * d, d);
      }
    }
  }

  void analyse(int il, const float* q, int32_t p) {
    const int32_t n = p + 1, H = hp_.n_head, d = hp_.head_dim;
    LayerState& L = layers_[slot_[il]];
    const size_t qi = static_cast<size_t>(p - (plan_.n_prompt - 1));
    if (run_.cells.size() <= qi) {
      run_.cells.resize(qi + 1, std::vector<AnalyzeCell>(layers_.size()));
      run_.query_positions.push_back(p);
    }
    AnalyzeCell& cell = run_.cells[qi][slot_[il]];

    sketch_logits(il, L, q, n);
    quest_bounds(q, n);
    LayerQuery lq;
    lq.n_head = H;
    lq.n_head_kv = hp_.n_head_kv;
    lq.n = n;
    lq.scale = hp_.attn_scale;
    lq.logits = logits_.data();
    lq.prob = prob_.data();
    lq.sketch_logits = sk_logits_.data();
    lq.quest_bound = bound_.data();
    lq.quest_block = run_.quest_block;
    lq.history = L.have_history ? L.history.data() : nullptr;

    const size_t n_m = run_.methods.size(), n_b = plan_.budgets.size();
    cell.recall.assign(n_b * n_m, NAN);
    pool_.parallel_for(static_cast<int64_t>(n_b * n_m), 1, [&](int64_t a, int64_t z) {
      for (int64_t i = a; i < z; ++i) {
        const AnalysisMethod m = run_.methods[i % n_m];
        if (!method_available(lq, m)) continue;
        const BudgetSplit s =
            split_budget(plan_.budgets[i / n_m].budget, n, plan_.budgets[i / n_m].sinks,
                         plan_.budgets[i / n_m].local);
        cell.recall[i] = method_recall(lq, m, s);
      }
    });

    // Block granularity on the attention summed over heads.
    std::vector<float> total(n, 0.0f);
    for (int32_t h = 0; h < H; ++h) {
      for (int32_t j = 0; j < n; ++j) total[j] += prob_[int64_t{h} * n + j];
    }
    const int32_t k = std::max(1, std::min(plan_.recall_k, n / 4));
    cell.block_recall.clear();
    for (int32_t b : plan_.blocks) cell.block_recall.push_back(block_recall(total.data(), n, k, b));

    // Top-p budget of the true attention, per head: over all keys and over the middle keys.
    const int32_t n_mass = static_cast<int32_t>(plan_.masses.size());
    cell.top_p_all.assign(static_cast<size_t>(H) * n_mass, 0);
    cell.top_p_mid.assign(static_cast<size_t>(H) * n_mass, 0);
    pool_.parallel_for(H, 1, [&](int64_t a, int64_t z) {
      for (int64_t h = a; h < z; ++h) {
        top_p_budgets(prob_.data() + h * n, 1, n, plan_.masses, plan_.exclude_sinks,
                      plan_.exclude_window, cell.top_p_all.data() + h * n_mass,
                      cell.top_p_mid.data() + h * n_mass);
      }
    });

    cell.logit_l1.resize(H);
    for (int32_t h = 0; h < H; ++h) cell.logit_l1[h] = l1_norm(logits_.data() + int64_t{h} * n, n);

    std::vector<float> raw(q, q + int64_t{H} * d), rot = raw, fp(d);
    rotate_to_origin(rot.data(), H, d, hp_.n_rot, hp_.rope_base[il], hp_.rope_mode, p,
                     hp_.rope_scaling);
    mean_over_heads(rot.data(), H, d, fp.data());
    if (!L.prev_raw.empty()) {
      cell.cos_raw = mean_head_cosine(L.prev_raw.data(), raw.data(), H, d);
      cell.cos_rotated = mean_head_cosine(L.prev_rot.data(), rot.data(), H, d);
      cell.cos_fingerprint = cosine_similarity(L.prev_fp.data(), fp.data(), d);
    }
    L.prev_raw = std::move(raw);
    L.prev_rot = std::move(rot);
    L.prev_fp = std::move(fp);
  }

  const ModelHParams& hp_;
  ThreadPool& pool_;
  const AnalyzePlan& plan_;
  const SketchProjection& sketch_;
  AnalyzeRun& run_;
  std::vector<int32_t> slot_;  // [n_layer] index into run_.layers, -1: not analysed
  std::vector<LayerState> layers_;
  int32_t n_loaded_ = 0;
  std::vector<float> kf_, logits_, prob_, sk_logits_, bmin_, bmax_, bound_, acc_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read the document " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw UserError("cannot write " + path.string());
}

void check_options(const AnalyzeOptions& o) {
  if (o.prompt.empty() && o.file.empty())
    throw UserError("nothing to analyse: give -p TEXT and/or -f FILE");
  if (o.budgets.empty()) throw UserError("--budget needs at least one value");
  for (int32_t b : o.budgets) {
    if (b < 1)
      throw UserError("--budget " + std::to_string(b) + " is not a positive number of tokens");
  }
  for (int32_t b : o.blocks) {
    if (b < 1) throw UserError("--blocks " + std::to_string(b) + " is not a positive block size");
  }
  if (o.blocks.empty()) throw UserError("--blocks needs at least one block size");
  if (o.masses.empty()) throw UserError("--mass needs at least one value");
  for (double m : o.masses) {
    if (!(m > 0 && m <= 1)) throw UserError("--mass " + std::to_string(m) + " is not in (0, 1]");
  }
  if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec || !std::filesystem::is_directory(o.out)) {
      throw UserError("cannot create the output directory " + o.out +
                      (ec ? ": " + ec.message() : ""));
    }
  }
}

int analyze(const AnalyzeOptions& o) {
  check_options(o);
  const std::string document = o.file.empty() ? std::string() : read_file(o.file);
  LoadedModel lm = load_for_run(o.model);
  const Model& model = *lm.model;
  const ModelHParams& hp = model.hp;
  const Tokenizer& tok = *model.tokenizer;
  const std::string text = build_prompt_text(model, document, o.prompt, o.chat);
  const std::vector<int32_t> ids = tok.encode(text, tok.add_bos(), o.chat);
  const int32_t n_prompt = static_cast<int32_t>(ids.size());
  constexpr int32_t kMinPrompt = 16;
  if (n_prompt < kMinPrompt) {
    throw UserError("the prompt has " + std::to_string(n_prompt) + " tokens; analyse at least " +
                    std::to_string(kMinPrompt));
  }
  if (int64_t{n_prompt} + o.n_decode > lm.n_ctx) {
    throw UserError("the prompt has " + std::to_string(n_prompt) + " tokens; with " +
                    std::to_string(o.n_decode) + " decode steps that exceeds the context of " +
                    std::to_string(lm.n_ctx) + " tokens (raise -c or shorten the prompt)");
  }

  AnalyzeRun run;
  run.model = lm.path;
  run.arch = hp.arch;
  run.n_layer = hp.n_layer;
  run.n_head = hp.n_head;
  run.n_head_kv = hp.n_head_kv;
  run.head_dim = hp.head_dim;
  run.n_ctx = lm.n_ctx;
  run.threads = lm.pool->size();
  run.prompt_tokens = n_prompt;
  run.decode_steps = o.n_decode;
  run.methods.assign(analysis_methods().begin(), analysis_methods().end());
  run.blocks = o.blocks;
  run.h2o_history = std::min(o.h2o_history, n_prompt - 1);
  const PolicyConfig defaults;
  run.theta = defaults.theta;

  AnalyzePlan plan;
  plan.n_prompt = n_prompt;
  plan.n_total = n_prompt + o.n_decode;
  plan.hist_begin = n_prompt - 1 - run.h2o_history;
  plan.recall_k = o.recall_k;
  plan.blocks = o.blocks;
  plan.theta = run.theta;
  plan.masses = o.masses;
  plan.exclude_sinks = o.exclude_sinks;
  plan.exclude_window = o.exclude_window;
  run.masses = o.masses;
  run.exclude_sinks = o.exclude_sinks;
  run.exclude_window = o.exclude_window;
  for (int32_t requested : o.budgets) {
    const int32_t b = scaled_budget(requested, n_prompt);
    // Explicit sinks/local are scaled along with the budget, like the defaults.
    auto part = [&](int32_t v) {
      return v < 0 ? v : static_cast<int32_t>(int64_t{v} * b / requested);
    };
    plan.budgets.push_back(split_budget(b, n_prompt, part(o.sinks), part(o.local)));
    run.budget_requested.push_back(requested);
    if (b != requested) {
      run.notes.push_back("budget " + std::to_string(requested) + " exceeds half of the " +
                          std::to_string(n_prompt) + "-token context; analysed at " +
                          std::to_string(b) + " with sinks and window scaled alike");
    }
  }
  run.budgets = plan.budgets;
  run.recall_k = std::max(1, std::min(o.recall_k, n_prompt / 4));
  if (run.recall_k != o.recall_k) {
    run.notes.push_back("recall@k uses k = " + std::to_string(run.recall_k) +
                        " (a quarter of the context)");
  }

  SketchSpec ss;
  ss.head_dim = hp.head_dim;
  ss.dim = o.sketch_dim > 0 ? o.sketch_dim : std::max(1, hp.head_dim / 8);
  ss.n_kv_head = hp.n_head_kv;
  ss.shared = defaults.sketch_shared;
  ss.seed = defaults.seed;
  if (!o.sketch_basis.empty()) {
    auto b = load_sketch_basis(o.sketch_basis);
    if (!b) throw UserError(b.message());
    if (Status st = check_sketch_basis_shape(*b, hp); !st) throw UserError(st.message());
    ss.dim = b->dim;
    ss.shared = false;
    ss.basis_path = o.sketch_basis;
    ss.basis = std::make_shared<const SketchBasis>(std::move(b.value()));
    run.notes.push_back("sketch: PCA basis " + o.sketch_basis + " (d_s " + std::to_string(ss.dim) +
                        ")");
  }
  const SketchProjection sketch(ss);

  std::optional<HeadPlan> head_plan;
  if (!o.head_plan.empty()) {
    const HeadShape shape{hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim};
    auto hpl = load_head_plan(o.head_plan, &shape);
    if (!hpl) throw UserError(hpl.message());
    head_plan = std::move(hpl.value());
    run.head_plan = o.head_plan;
  }
  run.sketch_dim = ss.dim;

  int n_sliding = 0;
  for (LayerKind k : hp.layer_kind) n_sliding += k == LayerKind::sliding;
  if (n_sliding == hp.n_layer) throw UserError("the model has no full-attention layer to analyse");
  if (n_sliding > 0) {
    run.notes.push_back(std::to_string(n_sliding) +
                        " sliding-window layers are left out (they only see their " +
                        std::to_string(hp.sliding_window) +
                        "-token window); the full-attention layers are analysed");
  }
  if (run.h2o_history == 0) {
    run.notes.push_back(
        "h2o has no history for the last prompt token (--h2o-history 0); its figures cover the "
        "decode queries");
  }

  // kv_budget_bytes gives a sliding layer its window; while a prefill chunk is written it
  // also holds the chunk, so each sliding layer gets one full-layer chunk's bytes on top.
  ModelHParams one_layer = hp;
  one_layer.layer_kind.assign(1, LayerKind::full);
  const int64_t kv_bytes = kv_budget_bytes(hp, plan.n_total, 1, 16) +
                           n_sliding * kv_budget_bytes(one_layer, o.chunk + 32, 1, 16);
  // The prompt and the greedy decode go through the engine (one sequence, dense, chunks of
  // --chunk), its CPU runner's attention watched by the analyzer; the last token generated is
  // never written, so the n_decode decode steps see every decode query.
  EngineConfig ec;
  ec.n_ctx = plan.n_total + 1;
  ec.max_running = 1;
  ec.max_batch_tokens = o.chunk;
  ec.max_step_ms = 0;
  ec.kv_budget_bytes = kv_bytes;
  ec.prefix_cache = false;
  ec.sketch_keys = false;
  ec.pool = lm.pool.get();
  auto engine = Engine::create(std::shared_ptr<const Model>(&model, [](const Model*) {}), ec);
  if (!engine) throw UserError(engine.message());
  Forward& fwd = *static_cast<Forward*>((*engine)->runner());
  Analyzer an(hp, *lm.pool, plan, sketch, run);
  if (head_plan) {  // the retrieval mask of the analysed layers
    run.retrieval.assign(run.layers.size() * hp.n_head, 0);
    for (size_t l = 0; l < run.layers.size(); ++l) {
      for (int32_t h = 0; h < hp.n_head; ++h)
        run.retrieval[l * hp.n_head + h] = head_plan->is_retrieval(run.layers[l], h);
    }
  }
  fwd.set_observer(&an);
  const bool tty = isatty(2) && log_level() <= LogLevel::info;
  GenerateOptions g;
  g.n_predict = o.n_decode + 1;  // the first token comes with the prefill
  g.n_batch = o.chunk;
  g.sampling.temperature = 0.0f;  // greedy
  g.stop_at_eog = false;
  g.policy = std::make_shared<const PolicyConfig>(*make_policy("dense"));
  if (tty) {
    g.on_prefill_progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\ranalyze: prefill %lld/%lld tokens", static_cast<long long>(done),
                   static_cast<long long>(total));
    };
  }
  int32_t n_gen = 0;
  auto st = generate_with_engine(**engine, ids, g, [&](int32_t) {
    if (tty && n_gen > 0)
      std::fprintf(stderr, "\ranalyze: decode %d/%d        ", n_gen, o.n_decode);
    ++n_gen;
    return true;
  });
  if (!st) throw UserError(st.message());
  run.prefill_ms = st->prefill_ms;
  run.decode_ms = st->decode_ms;
  run.analysis_ms = an.busy_ms;
  if (tty) std::fprintf(stderr, "\r\033[K");
  fwd.set_observer(nullptr);

  const nlohmann::json j = analyze_json(run);
  if (!o.out.empty()) {
    const std::filesystem::path dir(o.out);
    write_file(dir / "analysis.json", j.dump(1) + "\n");
    write_file(dir / "analysis.html", analyze_html(j));
  }
  if (o.json) {
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s", analyze_text(j).c_str());
    if (!o.out.empty())
      std::printf("wrote %s/analysis.json and %s/analysis.html\n", o.out.c_str(), o.out.c_str());
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<AnalyzeOptions>();
  add_model_flags(app, o->model);
  app.add_option("-p,--prompt", o->prompt,
                 "the prompt, or a question about the document given with -f");
  app.add_option("-f,--file", o->file, "a document (text file) to use as the prompt");
  app.add_flag("--chat", o->chat, "format the prompt with the model's chat template");
  app.add_option("-n,--n-decode", o->n_decode,
                 "greedy decode steps analysed after the last prompt token")
      ->check(CLI::Range(0, 4096));
  app.add_option("--budget", o->budgets,
                 "key budget(s) per layer, sinks + picked + window (comma list; default 2688 = 128 "
                 "+ 2048 + 512)")
      ->delimiter(',');
  app.add_option("--sinks", o->sinks, "sink tokens in the budget (default: 128/2688 of it)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--local", o->local,
                 "recent-window tokens in the budget (default: 512/2688 of it)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--recall-k", o->recall_k,
                 "size of the critical set for recall@k (capped at a quarter of the context)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--blocks", o->blocks, "block sizes for recall@k (comma list)")->delimiter(',');
  app.add_option("--h2o-history", o->h2o_history,
                 "last prompt queries whose attention seeds h2o's accumulated scores (0: earlier "
                 "analysed queries only)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--sketch-dim", o->sketch_dim, "sketch dimension (default head_dim / 8)")
      ->check(CLI::Range(0, 4096));
  app.add_option(
      "--sketch-basis", o->sketch_basis,
      "PCA sketch basis (sieve calibrate --sketch-basis) instead of the random projection");
  app.add_option("--chunk", o->chunk, "prefill chunk size in tokens")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--mass", o->masses,
                 "attention masses for the top-p budget of the true attention (comma list in (0, "
                 "1]; default 0.9,0.95)")
      ->delimiter(',');
  app.add_option(
         "--exclude-window", o->exclude_window,
         "recent keys (the query's own included) left out of the middle keys of the top-p budget")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--exclude-sinks", o->exclude_sinks,
                 "first keys left out of the middle keys of the top-p budget")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--head-plan", o->head_plan,
                 "a head plan (sieve calibrate): the top-p budget is also summarised over its "
                 "retrieval heads");
  app.add_flag("--json", o->json, "print one JSON object on stdout");
  app.add_option("--out", o->out,
                 "write analysis.json and analysis.html (inline SVG plots) into this directory");
  return [o]() { return analyze(*o); };
}

SIEVE_COMMAND(
    "analyze",
    "attention diagnostics for a prompt: recall of each sparse method at equal budget, block "
    "granularity, decode query similarity, head logit norms",
    setup);

}  // namespace
}  // namespace sieve::cli

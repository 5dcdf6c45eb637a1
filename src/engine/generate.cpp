#include "engine/generate.h"

#include <chrono>

#include "core/log.h"
#include "engine/sparse_seq.h"

namespace sieve {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

constexpr int32_t kPageSize = 16;

// Frees the sequence on every exit path.
struct SeqGuard {
  KvStore& kv;
  KvSeqId seq;
  ~SeqGuard() { (void)kv.free_sequence(seq); }
};

}  // namespace

Generator::Generator(const Model& model, ThreadPool& pool, int32_t n_ctx, const SketchSpec& sketch)
    : model_(model), pool_(pool), n_ctx_(n_ctx) {
  make_store(sketch, max_chunk_);
}

static bool same_layout(const std::vector<KvCapacity>& a, const std::vector<KvCapacity>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].window != b[i].window || a[i].n_sink != b[i].n_sink)
      return false;
  }
  return true;
}

void Generator::make_store(const SketchSpec& sketch, int64_t max_chunk,
                           const std::vector<KvCapacity>& layout) {
  max_chunk_ = max_chunk;
  const ModelHParams& hp = model_.hp;
  fwd_.reset();
  kv_.reset();
  sketch_ = std::make_unique<SketchProjection>(sketch);
  layout_ = layout.empty() ? kv_layout_for(nullptr, hp) : layout;
  KvConfig cfg = kv_config_for(hp, 0, kPageSize, hp.arch + ":" + hp.name, &layout_);
  cfg.sketch_dim = sketch.dim;
  cfg.budget_bytes = kv_budget_bytes(hp, n_ctx_, 1, kPageSize, sketch.dim, max_chunk, &layout_);
  auto store = KvStore::create(cfg);
  SIEVE_ASSERT(store.ok());
  kv_ = std::make_unique<KvStore>(std::move(store.value()));
  fwd_ = std::make_unique<Forward>(model_, pool_, *kv_, sketch_.get());
}

Status Generator::prefill(KvSeqId seq, std::span<const int32_t> prompt, int32_t n_batch,
                          bool all_logits, const std::function<void(int64_t, int64_t)>& progress,
                          std::vector<float>& logits, std::vector<float>* all, SparseSeq* sparse) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t i = kv_->n_tokens(seq); i < n; i += n_batch) {
    const int64_t m = std::min<int64_t>(n_batch, n - i);
    const KvAppend app{seq, prompt.subspan(i, m)};
    auto room = kv_->reserve(std::span<const KvAppend>(&app, 1));
    if (!room) return room.error();
    if (!room->fits()) {
      return make_error("the KV cache has no room for {} more tokens ({} pages missing)", m,
                        room->n_pages_missing());
    }
    BatchEntry e;
    e.seq = seq;
    e.tokens = prompt.subspan(i, m);
    e.all_logits = all_logits;
    e.sparse = sparse;
    SIEVE_TRY(fwd_->run(std::span<const BatchEntry>(&e, 1), logits));
    if (sparse) SIEVE_TRY(sparse_after_step(*kv_, seq, *sparse, model_.hp));
    if (all) all->insert(all->end(), logits.begin(), logits.end());
    SIEVE_TRY(kv_->publish(seq));
    if (progress) progress(i + m, n);
  }
  return {};
}

Result<GenerateStats> Generator::generate(std::span<const int32_t> prompt,
                                          const GenerateOptions& opt,
                                          const std::function<bool(int32_t)>& on_token) {
  GenerateStats st;
  if (prompt.empty()) return make_error("the prompt is empty; give some text with -p or -f");
  if (static_cast<int64_t>(prompt.size()) > n_ctx_) {
    return make_error(
        "the prompt has {} tokens, more than the context size {}; shorten it or raise -c (the "
        "model was trained with {} tokens)",
        prompt.size(), n_ctx_, model_.hp.n_ctx_max());
  }
  SIEVE_TRY(validate(opt.sampling));
  if (opt.n_batch <= 0) return make_error("batch size {} must be positive", opt.n_batch);
  for (int32_t t : prompt) {
    if (t < 0 || t >= model_.hp.n_vocab) {
      return make_error("token id {} is outside the vocabulary [0, {})", t, model_.hp.n_vocab);
    }
  }
  const PolicyConfig policy = opt.policy
                                  ? resolve_auto(*opt.policy, static_cast<int64_t>(prompt.size()))
                                  : *make_policy("dense");
  const int32_t n_batch =
      prefill_chunk_for(policy, static_cast<int64_t>(prompt.size()), opt.n_batch);
  SIEVE_TRY(check_policy_for_model(policy, model_.hp));
  const SketchSpec want = sketch_spec_for(policy, model_.hp);
  // The store's layout follows the policy (rtpurbo: window-only layers without retrieval heads).
  const std::vector<KvCapacity> layout = kv_layout_for(&policy, model_.hp);
  if ((want.dim > 0 && !(want == sketch_->spec())) || n_batch > max_chunk_ ||
      !same_layout(layout, layout_)) {
    const SketchSpec keep = want.dim > 0 ? want : sketch_->spec();
    make_store(keep, std::max<int64_t>(max_chunk_, n_batch), layout);
  }
  SIEVE_TRY(check_uniprefill_layers(policy, model_.hp));
  std::unique_ptr<SparseSeq> sparse;
  if (!policy.is_dense()) {
    sparse = std::make_unique<SparseSeq>(policy, model_.hp);
    sparse->prompt_tokens = static_cast<int64_t>(prompt.size());
  }
  st.policy = policy.describe();
  auto added = kv_->add_sequence(prompt, policy_cache_salt(policy));
  if (!added) return added.error();
  SeqGuard guard{*kv_, added->seq};
  st.cached_tokens = added->n_cached;

  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  SIEVE_TRY(prefill(added->seq, prompt, n_batch, false, opt.on_prefill_progress, logits, nullptr,
                    sparse.get()));
  st.prefill_ms = ms_since(t0);
  st.prompt_tokens = static_cast<int64_t>(prompt.size());

  Sampler sampler(opt.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const auto t1 = std::chrono::steady_clock::now();
  for (int32_t g = 0; g < opt.n_predict; ++g) {
    const int32_t tok = sampler.sample(logits, history);
    history.push_back(tok);
    st.completion_tokens++;
    if (opt.stop_at_eog && model_.tokenizer->is_eog(tok)) {
      st.stopped_by_eog = true;
      break;
    }
    if (!on_token(tok)) break;
    if (g + 1 == opt.n_predict || kv_->n_tokens(added->seq) >= n_ctx_) break;
    const KvAppend app{added->seq, std::span<const int32_t>(&history.back(), 1)};
    auto room = kv_->reserve(std::span<const KvAppend>(&app, 1));
    if (!room) return room.error();
    if (!room->fits()) break;  // sized for n_ctx: only reached at the context end
    BatchEntry e;
    e.seq = added->seq;
    e.tokens = std::span<const int32_t>(&history.back(), 1);
    e.sparse = sparse.get();
    SIEVE_TRY(fwd_->run(std::span<const BatchEntry>(&e, 1), logits));
    if (sparse) SIEVE_TRY(sparse_after_step(*kv_, added->seq, *sparse, model_.hp));
  }
  st.decode_ms = ms_since(t1);
  st.kv_bytes = kv_bytes_held(*kv_, added->seq, sparse.get());
  if (sparse) {
    st.sparse = sparse->stats;
    st.sparse.kv_bytes_held = st.kv_bytes;
  } else {
    st.sparse.kv_bytes_held = st.kv_bytes;
  }
  const KvStats ks = kv_->stats();
  st.kv_bytes_per_token_full = ks.bytes_per_token_full;
  st.kv_bytes_window_max = ks.max_bytes_per_seq_window;
  // A store may keep one stream per KV head (rtpurbo): a layer is full if any stream of it is.
  const int32_t G = kv_->geometry().n_head_group;
  st.n_layers_full = st.n_layers_window = 0;
  for (int32_t il = 0; il < kv_->geometry().n_layer; ++il) {
    bool full = false;
    for (int32_t g = 0; g < G; ++g)
      full = full || !kv_->geometry().capacity[il * G + g].is_window();
    ++(full ? st.n_layers_full : st.n_layers_window);
  }
  st.n_streams_window = ks.n_stream_window;
  return st;
}

Result<std::vector<float>> Generator::prompt_logits(std::span<const int32_t> prompt,
                                                    int32_t n_batch) {
  if (prompt.empty() || static_cast<int64_t>(prompt.size()) > n_ctx_) {
    return make_error("prompt of {} tokens does not fit the context {}", prompt.size(), n_ctx_);
  }
  if (n_batch > max_chunk_ || !same_layout(layout_, kv_layout_for(nullptr, model_.hp))) {
    const SketchSpec keep = sketch_->spec();
    make_store(keep, std::max<int64_t>(max_chunk_, n_batch));
  }
  // No prefix reuse: every position's logits are computed.
  auto added = kv_->add_sequence(std::span<const int32_t>());
  if (!added) return added.error();
  SeqGuard guard{*kv_, added->seq};
  std::vector<float> all, logits;
  SIEVE_TRY(prefill(added->seq, prompt, n_batch, true, nullptr, logits, &all, nullptr));
  return all;
}

}  // namespace sieve

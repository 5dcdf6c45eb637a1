#include "engine/engine_generate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine/kv_binding.h"
#include "engine/sparse_seq.h"

namespace sieve {

Result<GenerateStats> generate_with_engine(Engine& engine, std::span<const int32_t> prompt,
                                           const GenerateOptions& opt,
                                           const std::function<bool(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  RequestParams rp;
  rp.prompt.assign(prompt.begin(), prompt.end());
  // n_predict 0: the prompt is prefilled all the same (the engine finishes a request of
  // max_tokens 0 before its prefill); its one token is dropped.
  const bool prefill_only = opt.n_predict == 0;
  rp.max_tokens = prefill_only ? 1 : opt.n_predict;
  rp.sampling = opt.sampling;
  rp.stop_at_eog = opt.stop_at_eog;
  rp.policy = opt.policy;
  rp.on_prefill = opt.on_prefill_progress;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, stopped = false, first = true;
  RequestEvent last;
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  const auto t0 = clock::now();
  clock::time_point t_first = t0, t_end = t0;
  std::atomic<RequestId> id{0};
  std::atomic<bool> stop_now{false};
  id = engine.submit(std::move(rp), [&](const RequestEvent& ev) {
    // Runs on the engine's thread; the caller waits below until the final event.
    if (!ev.finished) {
      if (first) t_first = clock::now();
      first = false;
      if (stopped || prefill_only) return;
      ++st.completion_tokens;  // the first token counts too
      if (opt.stop_at_eog && engine.model().tokenizer->is_eog(ev.token)) {
        st.stopped_by_eog = true;
        return;
      }
      if (!on_token(ev.token)) {
        stopped = true;
        // the id is known once submit() has returned; until then the caller cancels below
        if (const RequestId known = id.load())
          engine.cancel(known);
        else
          stop_now = true;
      }
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    t_end = clock::now();
    last = ev;
    done = true;
    cv.notify_all();
  });
  if (stop_now) engine.cancel(id);
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  if (last.reason == FinishReason::error) return make_error("{}", last.error);
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  if (!first) {
    st.prefill_ms = ms(t0, t_first);
    st.decode_ms = ms(t_first, t_end);
  } else {
    st.prefill_ms = ms(t0, t_end);
  }
  st.cached_tokens = last.cached_tokens;
  st.policy = last.policy;
  st.sparse = last.sparse;
  st.kv_bytes = last.sparse.kv_bytes_held;
  const KvStats ks = engine.kv_stats();
  st.kv_bytes_per_token_full = ks.bytes_per_token_full;
  st.kv_bytes_window_max = ks.max_bytes_per_seq_window;
  st.n_streams_window = ks.n_stream_window;
  // A store may keep one stream per KV head (rtpurbo): a layer is full if any stream of it is.
  const KvGeometry& geo = engine.kv_geometry();
  const int32_t G = geo.n_head_group;
  for (int32_t il = 0; il < geo.n_layer; ++il) {
    bool full = false;
    for (int32_t g = 0; g < G; ++g) full = full || !geo.capacity[il * G + g].is_window();
    ++(full ? st.n_layers_full : st.n_layers_window);
  }
  return st;
}

namespace {

bool same_layout(const std::vector<KvCapacity>& a, const std::vector<KvCapacity>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].window != b[i].window || a[i].n_sink != b[i].n_sink)
      return false;
  }
  return true;
}

constexpr int32_t kPageSize = 16;

}  // namespace

SequenceEngine::SequenceEngine(std::shared_ptr<const Model> model, const SequenceEngineConfig& cfg)
    : model_(std::move(model)), cfg_(cfg) {}

Result<std::unique_ptr<SequenceEngine>> SequenceEngine::create(std::shared_ptr<const Model> model,
                                                               const SequenceEngineConfig& cfg) {
  std::unique_ptr<SequenceEngine> se(new SequenceEngine(std::move(model), cfg));
  // Built now, dense: the CUDA runner uploads the weights once, and a policy that needs no
  // other store runs on this one.
  SIEVE_TRY(se->rebuild(*make_policy("dense"), se->max_chunk_, cfg.n_batch));
  return se;
}

SequenceEngine::~SequenceEngine() = default;

Status SequenceEngine::rebuild(const PolicyConfig& policy, int64_t max_chunk, int32_t n_batch) {
  engine_.reset();  // free the old store (and device memory) before the new one is allocated
  const ModelHParams& hp = model_->hp;
  sketch_ = sketch_spec_for(policy, hp);
  layout_ = kv_layout_for(&policy, hp);
  max_chunk_ = max_chunk;
  n_batch_ = n_batch;
  EngineConfig ec;
  // The scheduler ends a request once prompt + generated tokens reach its n_ctx; the last
  // token is never written, so n_ctx + 1 lets the KV fill to n_ctx.
  ec.n_ctx = cfg_.n_ctx + 1;
  ec.max_running = 1;
  ec.max_batch_tokens = n_batch;
  ec.max_step_ms = 0;  // one request at a time: steps sized by tokens
  ec.page_size = kPageSize;
  ec.prefix_cache = cfg_.prefix_cache;
  ec.pool = cfg_.pool;
  ec.threads = cfg_.threads;
  ec.runner_factory = cfg_.runner_factory;
  // The store's layout and sketch keys follow the policy (default_policy): rtpurbo's layers
  // without a retrieval head keep only sinks + window; only sketch-ranked policies keep keys.
  ec.default_policy = std::make_shared<const PolicyConfig>(policy);
  ec.sketch_keys = false;
  if (!cfg_.runner_factory) {
    ec.kv_budget_bytes =
        kv_budget_bytes(hp, cfg_.n_ctx, 1, kPageSize, sketch_.dim, max_chunk, &layout_);
  }
  auto e = Engine::create(model_, ec);
  if (!e) return e.error();
  engine_ = std::move(e.value());
  return {};
}

Result<GenerateStats> SequenceEngine::generate(std::span<const int32_t> prompt,
                                               const GenerateOptions& opt,
                                               const std::function<bool(int32_t)>& on_token) {
  const ModelHParams& hp = model_->hp;
  if (prompt.empty()) return make_error("the prompt is empty; give some text with -p or -f");
  if (static_cast<int64_t>(prompt.size()) > cfg_.n_ctx) {
    return make_error(
        "the prompt has {} tokens, more than the context size {}; shorten it or raise -c (the "
        "model was trained with {} tokens)",
        prompt.size(), cfg_.n_ctx, hp.n_ctx_max());
  }
  SIEVE_TRY(validate(opt.sampling));
  if (opt.n_batch <= 0) return make_error("batch size {} must be positive", opt.n_batch);
  for (int32_t t : prompt) {
    if (t < 0 || t >= hp.n_vocab)
      return make_error("token id {} is outside the vocabulary [0, {})", t, hp.n_vocab);
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  const PolicyConfig policy = opt.policy ? resolve_auto(*opt.policy, n) : *make_policy("dense");
  const int32_t chunk = prefill_chunk_for(policy, n, opt.n_batch);
  SIEVE_TRY(check_policy_for_model(policy, hp));
  const SketchSpec want = sketch_spec_for(policy, hp);
  if (!engine_ || (want.dim > 0 && !(want == sketch_)) || chunk > max_chunk_ ||
      opt.n_batch != n_batch_ || !same_layout(kv_layout_for(&policy, hp), layout_)) {
    SIEVE_TRY(rebuild(policy, std::max<int64_t>(max_chunk_, chunk), opt.n_batch));
  }
  SIEVE_TRY(check_uniprefill_layers(policy, hp));
  GenerateOptions g = opt;
  g.policy = std::make_shared<const PolicyConfig>(policy);
  return generate_with_engine(*engine_, prompt, g, on_token);
}

}  // namespace sieve

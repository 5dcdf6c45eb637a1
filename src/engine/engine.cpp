#include "engine/engine.h"

#include "engine/kv_binding.h"
#include "engine/sparse_seq.h"

namespace sieve {

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& cfg) {
  auto m = load_model(cfg.model_path);
  if (!m) return m.error();
  if (cfg.prepare_model) SIEVE_TRY(cfg.prepare_model(**m));
  return create(std::shared_ptr<const Model>(std::move(m.value())), cfg);
}

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const Model> model,
                                               const EngineConfig& cfg) {
  std::unique_ptr<Engine> e(new Engine());
  e->cfg_ = cfg;
  e->model_ = std::move(model);
  const ModelHParams& hp = e->model_->hp;
  if (e->cfg_.n_ctx <= 0) e->cfg_.n_ctx = hp.n_ctx_max();
  if (e->cfg_.max_running <= 0) return make_error("max_running must be positive");
  if (e->cfg_.page_size <= 0 || e->cfg_.page_size > 4096)
    return make_error("page size must be in [1, 4096]");
  if (e->cfg_.runner_factory) {
    RunnerLimits lim;
    lim.n_ctx = e->cfg_.n_ctx;
    lim.max_running = e->cfg_.max_running;
    lim.max_batch_tokens = e->cfg_.max_batch_tokens;
    auto r = e->cfg_.runner_factory(*e->model_, lim);
    if (!r) return r.error();
    e->runner_ = std::move(r.value());
  }
  SketchSpec sketch;
  if (e->cfg_.default_policy) sketch = sketch_spec_for(*e->cfg_.default_policy, hp);
  if (sketch.dim == 0 && e->cfg_.sketch_keys) sketch = sketch_spec_for(*make_policy("sketch"), hp);
  // A runner that keeps the rows itself keeps JL / PCA sketch keys beside them (the store's
  // geometry sizes them); indexer keys (an rtpurbo head plan) it does not keep yet.
  if (e->runner_ && !e->runner_->host_rows() && sketch.indexer) sketch = SketchSpec{};
  e->sketch_ = std::make_unique<SketchProjection>(sketch);
  // RTPurbo as the default policy: layers without a retrieval head keep only sinks + window
  // (requests that need more there are refused at admission, check_layout_compatible).
  const std::vector<KvCapacity> layout = kv_layout_for(e->cfg_.default_policy.get(), hp);
  int64_t budget = e->cfg_.kv_budget_bytes;
  if (budget <= 0 && e->runner_ && e->runner_->kv_capacity_bytes() > 0) {
    budget = e->runner_->kv_capacity_bytes();
  } else if (budget <= 0) {
    // A UniPrefill default policy prefills long prompts in one chunk of up_chunk tokens.
    int64_t max_chunk = e->cfg_.max_batch_tokens;
    if (e->cfg_.default_policy && e->cfg_.default_policy->drops_prefill()) {
      max_chunk = std::max<int64_t>(max_chunk, e->cfg_.default_policy->up_chunk);
    }
    budget = kv_budget_bytes(hp, e->cfg_.n_ctx, e->cfg_.max_running, e->cfg_.page_size, sketch.dim,
                             max_chunk, &layout);
  }
  KvConfig kc = kv_config_for(hp, budget, e->cfg_.page_size, hp.arch + ":" + hp.name, &layout);
  kc.prefix_cache = e->cfg_.prefix_cache;
  kc.sketch_dim = sketch.dim;
  kc.host_rows = !e->runner_ || e->runner_->host_rows();
  auto store = KvStore::create(kc);
  if (!store) return store.error();
  e->kv_ = std::make_unique<KvStore>(std::move(store.value()));
  e->pool_ = cfg.pool;
  if (!e->pool_) {
    e->own_pool_ = std::make_unique<ThreadPool>(cfg.threads > 0 ? cfg.threads : hardware_threads());
    e->pool_ = e->own_pool_.get();
  }
  SchedulerConfig sc;
  sc.max_batch_tokens = e->cfg_.max_batch_tokens;
  sc.prefill_chunk = e->cfg_.max_batch_tokens;
  sc.max_running = e->cfg_.max_running;
  sc.max_step_ms = e->cfg_.max_step_ms;
  sc.n_ctx = e->cfg_.n_ctx;
  sc.default_policy = e->cfg_.default_policy;
  sc.layout = layout;
  if (e->runner_)
    SIEVE_TRY(e->runner_->attach(*e->kv_));
  else
    e->runner_ = std::make_unique<Forward>(*e->model_, *e->pool_, *e->kv_, e->sketch_.get());
  e->sched_ = std::make_unique<Scheduler>(*e->model_, *e->runner_, *e->kv_, sc, e->sketch_.get());
  e->kv_snapshot_ = e->kv_->stats();
  e->thread_ = std::thread([p = e.get()] { p->loop(); });
  return e;
}

Status Engine::check_policy(const PolicyConfig& p, int64_t prompt_tokens) const {
  return sched_->check_policy(resolve_auto(p, prompt_tokens));
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

RequestId Engine::submit(RequestParams params, RequestCallback cb) {
  const RequestId id = next_id_++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back({id, std::move(params), std::move(cb)});
    idle_ = false;
  }
  cv_.notify_all();
  return id;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return idle_; });
}

SchedulerStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_snapshot_;
}

KvStats Engine::kv_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_snapshot_;
}

void Engine::loop() {
  for (;;) {
    std::vector<Pending> in;
    std::vector<RequestId> cancels;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || !incoming_.empty() || !cancels_.empty() || !sched_->idle(); });
      if (stop_) return;
      in.swap(incoming_);
      cancels.swap(cancels_);
    }
    for (auto& p : in) sched_->submit(std::move(p.params), std::move(p.cb), p.id);
    for (RequestId id : cancels) sched_->cancel(id);
    sched_->step();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_snapshot_ = sched_->stats();
      kv_snapshot_ = kv_->stats();
      if (sched_->idle() && incoming_.empty()) {
        idle_ = true;
        idle_cv_.notify_all();
      }
    }
  }
}

}  // namespace sieve

// The engine API the CLI, the server and eval use: load a model once, submit requests from
// any thread, stream their tokens through callbacks, cancel them. A background thread runs
// the continuous-batching scheduler; callbacks run on that thread and must not block.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/kv_store.h"
#include "model/model.h"

namespace sieve {

struct EngineConfig {
  std::string model_path;
  int32_t threads = 0;  // 0: all hardware threads
  // The CPU runner's threads, borrowed (it must outlive the engine and run no other job while
  // the engine steps); nullptr: the engine makes a pool of `threads`.
  ThreadPool* pool = nullptr;
  int32_t n_ctx = 0;               // per-request context; 0: the model's trained context
  int32_t max_running = 8;         // sequences decoded together
  int32_t max_batch_tokens = 512;  // tokens per step
  double max_step_ms = -1;  // step time budget (SchedulerConfig::max_step_ms): -1 auto, 0 off
  int32_t page_size = 16;
  int64_t kv_budget_bytes = 0;  // 0: room for max_running sequences of n_ctx tokens
  bool prefix_cache = true;
  PolicyPtr default_policy;  // for requests without one; nullptr: auto
  // Keep sketch keys (head_dim / 8 floats per KV head per token on full layers, about 12% of
  // the KV) so that any request may choose a sketch-ranked policy (sketch, stca). The
  // projection is the default policy's when it ranks by sketch, else the sketch preset's.
  bool sketch_keys = true;
  // The backend: empty = the CPU runner (Forward); else its factory (the CUDA runner). A
  // runner that holds the K/V rows itself sizes the store from its memory when
  // kv_budget_bytes is 0.
  RunnerFactory runner_factory;
  // Runs on the model right after create() loads it from model_path (the CLI's RoPE scaling
  // flags); an error fails create().
  std::function<Status(Model&)> prepare_model;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& cfg);
  // Builds on an already loaded model (tests, tools that load once).
  static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const Model> model,
                                                const EngineConfig& cfg);
  ~Engine();

  RequestId submit(RequestParams params, RequestCallback cb);
  // The admission check submit() applies to a request's policy (resolved for its prompt
  // length), for callers that answer a refusal before submitting (the server's 400).
  Status check_policy(const PolicyConfig& p, int64_t prompt_tokens) const;
  void cancel(RequestId id);
  // Blocks until no request is queued or running (or the timeout passes); true when idle.
  bool wait_idle(std::chrono::milliseconds timeout);

  const Model& model() const { return *model_; }
  const EngineConfig& config() const { return cfg_; }
  // The runner's backend ("cpu" or "cuda").
  std::string_view backend() const { return runner_ ? runner_->backend() : "cpu"; }
  // The runner itself (stats of a backend; the CPU runner is a Forward). Touch it only while
  // no request is queued or running: the engine's thread steps it.
  const ModelRunner* runner() const { return runner_.get(); }
  ModelRunner* runner() { return runner_.get(); }
  SchedulerStats stats() const;
  KvStats kv_stats() const;
  // The store's shape (fixed at create).
  const KvGeometry& kv_geometry() const { return kv_->geometry(); }

 private:
  Engine() = default;
  void loop();

  EngineConfig cfg_;
  std::shared_ptr<const Model> model_;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<SketchProjection> sketch_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> sched_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  struct Pending {
    RequestId id;
    RequestParams params;
    RequestCallback cb;
  };
  std::vector<Pending> incoming_;
  std::vector<RequestId> cancels_;
  std::atomic<RequestId> next_id_{1};
  bool stop_ = false;
  bool idle_ = true;
  SchedulerStats stats_snapshot_;
  KvStats kv_snapshot_;
  std::thread thread_;
};

}  // namespace sieve

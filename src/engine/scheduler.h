// Continuous batching: every step gives each running decode one token, then fills the step's
// budget with prefill chunks (step_planner.h): with --max-step-ms the budget is time, predicted
// by a cost model refitted from every measured step, so a running stream waits for at most one
// bounded step; without it, a token count. Order everywhere is (priority, arrival): admission,
// prefill chunks, and preemption, which takes the last (worst priority, newest) running request
// (its KV freed, recomputed later from prompt + generated tokens, nothing lost); a waiting
// request of better priority preempts a worse running one to get in. The step's KV is reserved
// all-or-nothing - never a crash, never a lost request. Cancellation frees a request's pages at
// the next step boundary.
// Single-threaded: Engine (engine.h) owns it on its thread.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/forward.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/step_planner.h"
#include "kv/kv_store.h"
#include "model/model.h"

namespace sieve {

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // tokens per step (decodes + prefill chunks)
  int32_t prefill_chunk = 512;     // largest prefill chunk of one request per step
  int32_t max_running = 64;        // sequences in flight
  int32_t n_ctx = 0;               // per-request context limit (prompt + generated)
  PolicyPtr default_policy;        // for requests without one; nullptr: auto
  std::vector<KvCapacity> layout;  // the store's per-layer capacity (empty: the model's own)
  // Step time budget in ms: > 0 fixed; 0 off (token budget only); < 0 auto: the shortest step
  // that keeps prefill throughput within 90% of full-size chunks (auto_step_budget()).
  double max_step_ms = 0;
  int32_t min_prefill_chunk = 16;  // the first waiting prompt gets at least this every step
  // Under a step budget, chunks grow to fill a multiple of this many rows a step: the
  // activation rows the CPU GEMM takes per pass (step_planner.h). 1: off.
  int32_t row_group = 8;
};

// Step durations for the /metrics histogram, cumulated by the scheduler.
struct StepTimeBuckets {
  static constexpr std::array<double, 12> kUpperMs = {5,   10,  25,  50,   75,   100,
                                                      150, 250, 500, 1000, 2500, 5000};
  std::array<int64_t, kUpperMs.size() + 1> count{};  // per bucket, not cumulative; last: +Inf
  double sum_ms = 0;
  int64_t n = 0;
  void observe(double ms);
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t finished = 0;
  int64_t cancelled = 0;
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t generated_tokens = 0;
  double last_step_ms = 0;
  int32_t last_step_prefill_tokens = 0;
  double step_budget_ms = 0;  // the last step's budget (0: none)
  StepTimeBuckets step_ms;
  StepCostModel::Coef cost_coef{};  // ms per step, GEMM step, prefill/decode token, key
};

class Scheduler {
 public:
  // sketch: the projection of the sketch keys the store keeps (nullptr: none kept; policies
  // that rank by sketch are then refused at submit).
  // The CPU runner (Forward) over `kv`, owned by the scheduler.
  Scheduler(const Model& model, ThreadPool& pool, KvStore& kv, const SchedulerConfig& cfg,
            const SketchProjection* sketch = nullptr);
  // Steps run on `runner` (any backend), which must outlive the scheduler and run over `kv`.
  Scheduler(const Model& model, ModelRunner& runner, KvStore& kv, const SchedulerConfig& cfg,
            const SketchProjection* sketch = nullptr);
  ~Scheduler();

  // Queues a request; errors (empty or over-long prompt, bad parameters) are reported through
  // the callback's final event right away.
  // `id` 0: the scheduler numbers the request.
  RequestId submit(RequestParams params, RequestCallback cb, RequestId id = 0);
  // Whether this engine can run a (resolved) policy: its files fit the model, the store's
  // sketch keys and per-layer capacity serve it. submit() refuses a request that fails it.
  Status check_policy(const PolicyConfig& p) const;
  // Marks a request cancelled; its final event (reason cancelled) and the release of its KV
  // happen at the next step boundary. Unknown or finished ids are ignored.
  void cancel(RequestId id);
  // One step: admission, KV reservation (with preemption), forward, sampling, events.
  // Returns false when there was nothing to do.
  bool step();
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerConfig& config() const { return cfg_; }

 private:
  struct Req;
  void normalize_config();
  void finish(Req& r, FinishReason reason, const std::string& error = {},
              const std::string& error_code = {});
  void preempt(Req& r);
  void release_kv(Req& r);
  void admit();
  void emit_token(Req& r, int32_t tok, const float* logits);
  void reap();
  void enqueue_waiting(std::unique_ptr<Req> r);
  void order_running();
  bool preempt_for(const Req& r);

  const Model& model_;
  KvStore& kv_;
  SchedulerConfig cfg_;
  const SketchProjection* sketch_;
  std::unique_ptr<Forward> own_runner_;  // the CPU runner when none was given
  ModelRunner& runner_;
  RequestId next_id_ = 1;
  uint64_t next_arrival_ = 0;
  std::deque<std::unique_ptr<Req>> waiting_;  // in (priority, arrival) order
  std::vector<std::unique_ptr<Req>>
      running_;  // in (priority, arrival) order: the last is the victim
  StepCostModel cost_;
  SchedulerStats stats_;
  std::vector<float> logits_;
};

}  // namespace sieve

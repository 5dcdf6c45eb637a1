// Continuous batching: every step takes a token budget, gives each running decode one token,
// fills the rest with prefill chunks (running prompts first, then admitted ones, FIFO), and
// reserves the step's KV all-or-nothing. When pages run out, the newest running request is
// preempted (its KV freed, recomputed later from prompt + generated tokens) - never a crash,
// never a lost request. Cancellation frees a request's pages at the next step boundary.
// Single-threaded: Engine (engine.h) owns it on its thread.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/forward.h"
#include "engine/model_runner.h"
#include "engine/request.h"
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
  void finish(Req& r, FinishReason reason, const std::string& error = {});
  void preempt(Req& r);
  void release_kv(Req& r);
  void admit();
  void emit_token(Req& r, int32_t tok, const float* logits);
  void reap();

  const Model& model_;
  KvStore& kv_;
  SchedulerConfig cfg_;
  const SketchProjection* sketch_;
  std::unique_ptr<Forward> own_runner_;  // the CPU runner when none was given
  ModelRunner& runner_;
  RequestId next_id_ = 1;
  std::deque<std::unique_ptr<Req>> waiting_;
  std::vector<std::unique_ptr<Req>> running_;  // in admission order (newest last)
  SchedulerStats stats_;
  std::vector<float> logits_;
};

}  // namespace sieve

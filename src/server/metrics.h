// Server metrics in the Prometheus text format (version 0.0.4): counters of requests, tokens,
// finish reasons and errors; histograms of time to first token, inter-token latency and
// end-to-end latency; gauges read from the engine at scrape time (running/waiting requests,
// KV pages) and the sparse-attention totals of finished requests (selected fraction,
// selection-cache hit rate). Names: snake_case, prefix sieve_, units as suffixes, counters
// end in _total (docs/server.md lists them). The latency histograms are also exported under
// vLLM's names with the prefix sieve: (sieve:time_to_first_token_seconds, ...), which
// dashboards and autoscalers written for vLLM key on, with the engine's step durations
// (sieve:iteration_duration_seconds).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_store.h"
#include "sparse/stats.h"

namespace sieve::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends the _bucket/_sum/_count lines (the HELP and TYPE lines too).
  void render(std::string& out, std::string_view name, std::string_view help) const;
  uint64_t count() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the engine reports at scrape time.
struct EngineSnapshot {
  bool ready = false;
  SchedulerStats sched;
  KvStats kv;
  int32_t page_size = 0;
  int32_t n_ctx = 0;
  std::string backend = "cpu";  // where the KV pages live: cpu (host memory) or cuda (device)
};

class Metrics {
 public:
  Metrics();

  // One HTTP request answered (endpoint: the route or "other"; status code).
  void count_http(std::string_view endpoint, int status);
  // A generation request ended: finish reason (stop, length, abort, error), token counts.
  void count_finished(std::string_view finish_reason, int64_t prompt_tokens, int64_t cached_tokens,
                      int64_t completion_tokens, const SparseStats& sparse);
  void count_error(std::string_view type);
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_itl(double seconds) { itl_.observe(seconds); }
  void observe_e2e(double seconds) { e2e_.observe(seconds); }
  void observe_prompt_tokens(double n) { prompt_len_.observe(n); }
  void observe_queue(double seconds) { queue_.observe(seconds); }

  std::atomic<int64_t> in_flight{0};    // generation requests being served
  std::atomic<int64_t> disconnects{0};  // requests cancelled because the client went away

  std::string render(const EngineSnapshot& e) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> http_;
  std::map<std::string, int64_t> finished_;
  std::map<std::string, int64_t> errors_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  SparseStats sparse_;
  Histogram ttft_, itl_, e2e_, prompt_len_, queue_;
};

}  // namespace sieve::server

#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sieve::server {
namespace {

// Prometheus float text: integers without a fraction, others with enough digits.
std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:.6g}", v);
}

void head(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void scalar(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            double v) {
  head(out, name, type, help);
  out += fmt::format("{} {}\n", name, num(v));
}

// Label values: escape backslash, quote and newline as the format requires.
std::string label(std::string_view v) {
  std::string r;
  for (char c : v) {
    if (c == '\\')
      r += "\\\\";
    else if (c == '"')
      r += "\\\"";
    else if (c == '\n')
      r += "\\n";
    else
      r += c;
  }
  return r;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double v) {
  if (!std::isfinite(v)) return;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i]++;
  sum_ += v;
  count_++;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::render(std::string& out, std::string_view name, std::string_view help) const {
  std::lock_guard<std::mutex> lock(mu_);
  head(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, num(bounds_[i]), cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cum);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, num(sum_), name, count_);
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5}),
      e2e_({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}),
      prompt_len_({16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}),
      queue_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::count_http(std::string_view endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  http_[{std::string(endpoint), status}]++;
}

void Metrics::count_finished(std::string_view reason, int64_t prompt_tokens, int64_t cached_tokens,
                             int64_t completion_tokens, const SparseStats& sparse) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_[std::string(reason)]++;
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  completion_tokens_ += completion_tokens;
  sparse_.add(sparse);
}

void Metrics::count_error(std::string_view type) {
  std::lock_guard<std::mutex> lock(mu_);
  errors_[std::string(type)]++;
}

std::string Metrics::render(const EngineSnapshot& e) const {
  std::string out;
  out.reserve(8192);
  {
    std::lock_guard<std::mutex> lock(mu_);
    head(out, "sieve_http_requests_total", "counter",
         "HTTP requests answered, by endpoint and status code.");
    for (const auto& [k, v] : http_)
      out += fmt::format("sieve_http_requests_total{{endpoint=\"{}\",code=\"{}\"}} {}\n",
                         label(k.first), k.second, v);
    head(out, "sieve_request_success_total", "counter",
         "Generation requests finished, by finish reason (stop, length, abort, error).");
    for (const char* r : {"stop", "length", "abort", "error"}) {
      auto it = finished_.find(r);
      out += fmt::format("sieve_request_success_total{{finish_reason=\"{}\"}} {}\n", r,
                         it == finished_.end() ? 0 : it->second);
    }
    head(out, "sieve_request_errors_total", "counter",
         "Requests rejected or failed, by error type.");
    for (const auto& [k, v] : errors_)
      out += fmt::format("sieve_request_errors_total{{type=\"{}\"}} {}\n", label(k), v);
    scalar(out, "sieve_prompt_tokens_total", "counter",
           "Prompt tokens of finished generation requests.", prompt_tokens_);
    scalar(out, "sieve_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens served from the prefix cache (finished requests).", cached_tokens_);
    scalar(out, "sieve_generation_tokens_total", "counter",
           "Generated tokens of finished requests.", completion_tokens_);
    scalar(out, "sieve_sparse_selected_tokens_total", "counter",
           "Keys read by attention over full-attention layers, summed over layer steps.",
           sparse_.selected_tokens);
    scalar(out, "sieve_sparse_context_tokens_total", "counter",
           "Keys dense attention would have read over the same layer steps.",
           sparse_.context_tokens);
    scalar(out, "sieve_sparse_selected_fraction", "gauge",
           "selected_tokens_total / context_tokens_total (1 when nothing was counted).",
           sparse_.selected_fraction());
    scalar(out, "sieve_selection_cache_lookups_total", "counter",
           "Selection-cache lookups during decode.", sparse_.cache_lookups);
    scalar(out, "sieve_selection_cache_hits_total", "counter",
           "Selection-cache hits during decode.", sparse_.cache_hits);
    scalar(out, "sieve_selection_cache_hit_rate", "gauge",
           "hits_total / lookups_total (0 when no lookups).", sparse_.hit_rate());
  }
  scalar(out, "sieve_requests_in_flight", "gauge", "Generation requests the server is serving.",
         in_flight.load());
  scalar(out, "sieve_client_disconnects_total", "counter",
         "Requests cancelled because the client disconnected.", disconnects.load());
  scalar(out, "sieve_ready", "gauge", "1 when the model is loaded and the server accepts work.",
         e.ready ? 1 : 0);
  if (e.ready) {
    scalar(out, "sieve_requests_running", "gauge", "Requests the engine is decoding or prefilling.",
           e.sched.running);
    scalar(out, "sieve_requests_waiting", "gauge", "Requests queued in the engine.",
           e.sched.waiting);
    scalar(out, "sieve_preemptions_total", "counter",
           "Requests preempted (KV freed, recomputed later).", e.sched.preemptions);
    scalar(out, "sieve_engine_steps_total", "counter", "Engine scheduler steps.", e.sched.steps);
    scalar(out, "sieve_kv_pages_used", "gauge", "KV pages held by sequences.", e.kv.n_pages_used);
    scalar(out, "sieve_kv_pages_cached", "gauge", "KV pages kept for prefix reuse.",
           e.kv.n_pages_cached);
    scalar(out, "sieve_kv_pages_total", "gauge", "KV pages in the pool.", e.kv.n_pages_total);
    scalar(out, "sieve_kv_cache_usage_ratio", "gauge", "kv_pages_used / kv_pages_total.",
           e.kv.n_pages_total ? double(e.kv.n_pages_used) / e.kv.n_pages_total : 0.0);
    scalar(out, "sieve_kv_sequences", "gauge", "Sequences holding KV.", e.kv.n_sequences);
    scalar(out, "sieve_kv_page_size_tokens", "gauge", "Tokens per KV page.", e.page_size);
    head(out, "sieve_kv_pool_bytes", "gauge",
         "Bytes of the KV pool, by where its pages live (cuda: device memory).");
    out += fmt::format("sieve_kv_pool_bytes{{backend=\"{}\"}} {}\n", e.backend,
                       int64_t{e.kv.n_pages_total} * e.kv.page_bytes);
    head(out, "sieve_kv_used_bytes", "gauge", "Bytes of the KV pool held by sequences.");
    out += fmt::format("sieve_kv_used_bytes{{backend=\"{}\"}} {}\n", e.backend,
                       int64_t{e.kv.n_pages_used} * e.kv.page_bytes);
    scalar(out, "sieve_context_length_tokens", "gauge", "Per-request context limit.", e.n_ctx);
  }
  ttft_.render(out, "sieve_time_to_first_token_seconds",
               "Request received to first token generated.");
  itl_.render(out, "sieve_inter_token_latency_seconds",
              "Time between consecutive tokens of one request.");
  e2e_.render(out, "sieve_e2e_request_latency_seconds", "Request received to its last token.");
  prompt_len_.render(out, "sieve_request_prompt_tokens", "Prompt length of generation requests.");
  // vLLM's names (vllm: -> sieve:), for dashboards and autoscalers written for vLLM.
  ttft_.render(out, "sieve:time_to_first_token_seconds",
               "Request received to first token generated.");
  itl_.render(out, "sieve:inter_token_latency_seconds",
              "Time between consecutive tokens of one request.");
  e2e_.render(out, "sieve:e2e_request_latency_seconds", "Request received to its last token.");
  queue_.render(
      out, "sieve:request_queue_time_seconds",
      "Request submitted to the engine to its first admission (KV reserved, prefill may start).");
  if (e.ready) {
    const StepTimeBuckets& st = e.sched.step_ms;
    head(out, "sieve:iteration_duration_seconds", "histogram",
         "Engine step durations (one batch of decodes and prefill chunks, sampling included).");
    int64_t cum = 0;
    for (size_t i = 0; i < StepTimeBuckets::kUpperMs.size(); ++i) {
      cum += st.count[i];
      out += fmt::format("sieve:iteration_duration_seconds_bucket{{le=\"{}\"}} {}\n",
                         num(StepTimeBuckets::kUpperMs[i] / 1000.0), cum);
    }
    cum += st.count.back();
    out += fmt::format("sieve:iteration_duration_seconds_bucket{{le=\"+Inf\"}} {}\n", cum);
    out += fmt::format(
        "sieve:iteration_duration_seconds_sum {}\nsieve:iteration_duration_seconds_count {}\n",
        num(st.sum_ms / 1000.0), st.n);
    scalar(
        out, "sieve_step_budget_seconds", "gauge",
        "The last step's time budget (--max-step-ms; 0 when the step had no decode or no budget).",
        e.sched.step_budget_ms / 1000.0);
  }
  return out;
}

}  // namespace sieve::server

#include "bench_gpu_depth.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>

#include "backend.h"
#include "command.h"
#include "core/log.h"
#include "engine/kv_binding.h"
#include "engine/sparse_seq.h"

#ifdef SIEVE_HAVE_CUDA
#include "gpu/gpu_policy.h"
#endif

namespace sieve::cli {

std::vector<int32_t> parse_batch_seqs(const std::vector<std::string>& items) {
  std::vector<int32_t> out;
  for (const std::string& s : items) {
    if (s == "fit") {
      if (out.empty()) {
        throw UserError(
            "--batch-seqs: 'fit' needs a number before it (e.g. 1,8,fit): the bytes a sequence "
            "holds come from that batch");
      }
      out.push_back(0);
      continue;
    }
    int32_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < 1 || v > 1024)
      throw UserError(fmt::format("--batch-seqs: '{}' is neither a count in [1, 1024] nor fit", s));
    out.push_back(v);
  }
  return out;
}

namespace {

using bench_clock = std::chrono::steady_clock;

// H200 read ceiling (shared/docs/gpu.md: ~4.5 TB/s read-only): the floor of a dense step's KV
// reads were every sequence's keys distinct memory.
constexpr double k_read_bytes_per_s = 4.5e12;

struct SeqRun {
  std::vector<bench_clock::time_point> t;  // when each generated token arrived
  RequestEvent last;                       // the final event
};

// n copies of the request submitted at once; returns when every one has finished. An error
// event fails the whole batch with its message.
Result<std::vector<SeqRun>> run_together(Engine& engine, const RequestParams& rp, int32_t n) {
  std::mutex mu;
  std::condition_variable cv;
  int32_t done = 0;
  std::vector<SeqRun> runs(n);
  for (int32_t i = 0; i < n; ++i) {
    engine.submit(rp, [&, i](const RequestEvent& ev) {
      // Token events run on the engine's thread only; the final one publishes them under mu.
      if (!ev.finished) {
        runs[i].t.push_back(bench_clock::now());
        return;
      }
      std::lock_guard<std::mutex> lock(mu);
      runs[i].last = ev;
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == n; });
  }
  for (const SeqRun& r : runs) {
    if (r.last.reason == FinishReason::error) return make_error("{}", r.last.error);
  }
  return runs;
}

// Decode of a batch: from the step that gave the last sequence its first token (the prompts'
// last pages prefill first, maybe over several steps) to the last token of all.
struct DecodeFigures {
  double wall_ms = 0;
  int64_t tokens = 0;  // tokens generated after that step, all sequences
  int32_t steps = 0;   // decode steps in it (the most tokens one sequence got)
};

DecodeFigures decode_figures(const std::vector<SeqRun>& runs) {
  bench_clock::time_point t0 = runs.front().t.front(), t1 = t0;
  for (const SeqRun& r : runs) {
    t0 = std::max(t0, r.t.front());
    t1 = std::max(t1, r.t.back());
  }
  DecodeFigures f;
  for (const SeqRun& r : runs) {
    const auto n = static_cast<int32_t>(
        std::count_if(r.t.begin(), r.t.end(), [&](bench_clock::time_point x) { return x > t0; }));
    f.tokens += n;
    f.steps = std::max(f.steps, n);
  }
  f.wall_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string batch_label(int32_t b) {
  return b == 0 ? std::string("fit") : std::to_string(b);
}

// ratios to the dense row of the same length and batch label
void add_ratios(nlohmann::json& rows) {
  for (auto& r : rows) {
    if (!r.contains("decode_tok_s") || r.value("is_dense", false)) continue;
    for (const auto& d : rows) {
      if (!d.value("is_dense", false) || !d.contains("decode_tok_s") ||
          d["prompt_tokens"] != r["prompt_tokens"] || d["batch"] != r["batch"])
        continue;
      r["decode_vs_dense"] = r["decode_tok_s"].get<double>() / d["decode_tok_s"].get<double>();
      r["seqs_fit_vs_dense"] =
          static_cast<double>(r["seqs_fit"].get<int64_t>()) / d["seqs_fit"].get<int64_t>();
      if (r.contains("ttft_ms") && d.contains("ttft_ms") && r["ttft_own"] == true &&
          d["ttft_own"] == true)
        r["ttft_speedup_vs_dense"] = d["ttft_ms"].get<double>() / r["ttft_ms"].get<double>();
      break;
    }
  }
}

}  // namespace

void run_depth_bench(const Model& model, const std::vector<int32_t>& prompt,
                     const std::vector<PolicyPtr>& policies, const DepthOptions& o,
                     nlohmann::json& results, std::string& device) {
  int32_t max_len = 0, max_b = 1;
  for (int32_t l : o.lengths) max_len = std::max(max_len, l);
  for (int32_t b : o.batch_seqs) max_b = std::max(max_b, b == 0 ? o.fit_cap : b);
  // Room for the prompt, the decoded tokens and the last page's rounding.
  const int32_t n_ctx = max_len + o.n_decode + 32;
  const bool cuda = o.backend == "cuda";
  std::unique_ptr<GpuRunner> gpu;
  std::unique_ptr<Engine> cpu_engine;
  if (cuda) {
    GpuRunner::Options go;
    go.prefix_cache = true;  // the batch's sequences share the prompt's pages
    go.mem_fraction = o.mem_fraction;
    go.max_running = max_b;
    gpu = std::make_unique<GpuRunner>(model, n_ctx, go);
    device = gpu->device();
  } else {
    // The CPU engine (the harness's own check, and CPU figures): a store with room for
    // max_b sequences of n_ctx tokens.
    EngineConfig ec;
    ec.threads = o.threads;
    ec.n_ctx = n_ctx;
    ec.max_running = max_b;
    ec.max_batch_tokens = 512;
    ec.max_step_ms = 0;
    ec.prefix_cache = true;
    auto e = Engine::create(std::shared_ptr<const Model>(&model, [](const Model*) {}), ec);
    if (!e) throw UserError(e.message());
    cpu_engine = std::move(*e);
  }
  Engine& engine = cuda ? gpu->engine() : *cpu_engine;
  const KvStats ks = engine.kv_stats();
  const int64_t store_bytes = int64_t{ks.n_pages_total} * ks.page_bytes;
  log_info("bench: decode at depth, KV pool {:.2f} GiB ({} pages of {} KiB), {} B per token dense",
           store_bytes / 1073741824.0, ks.n_pages_total, ks.page_bytes >> 10,
           ks.bytes_per_token_full);

  std::ofstream lines;
  if (!o.rows_out.empty()) {
    lines.open(o.rows_out, std::ios::app);
    if (!lines) throw UserError("--rows-out: cannot append to " + o.rows_out);
  }
  nlohmann::json rows = nlohmann::json::array();
  auto emit = [&](nlohmann::json r) {
    if (lines.is_open()) lines << r.dump() << std::endl;  // flushed: a killed run keeps it
    rows.push_back(std::move(r));
  };
  // The store's sketch keys per KV head (the CPU engine keeps them; the GPU's store does not):
  // its token is K + V (f16) + sketch (f32) + a position (kv_budget_bytes' rule).
  const int64_t kv_row_bytes = 2LL * model.hp.kv_dim() * 2 + 4;
  const auto sketch_dim =
      static_cast<int32_t>((ks.token_bytes - kv_row_bytes) / (4LL * model.hp.n_head_kv));
  RequestParams base;
  base.sampling.temperature = 0.0f;
  base.stop_at_eog = false;
  for (int32_t len : o.lengths) {
    base.prompt.assign(prompt.begin(), prompt.begin() + len);
    // The cache salt names the length too: a shorter prompt is a prefix of a longer one, and
    // each length's first prefill must compute every token (its time to first token).
    std::string shared_salt, shared_desc, shared_error;
    double shared_ttft = 0;
    RequestParams shared_rp = base;
    if (o.shared_prefill) {
      const PolicyConfig sp = resolve_auto(*o.shared_prefill, len);
      shared_desc = sp.describe();
      shared_salt = fmt::format("bench:{}:shared:{}", len, shared_desc);
      shared_rp.policy = o.shared_prefill;
      shared_rp.max_tokens = 1;
      shared_rp.cache_salt = shared_salt;
      auto r = run_together(engine, shared_rp, 1);
      if (r) {
        shared_ttft = r->front().last.ttft_ms;
        log_info("{} prompt {}: shared prefill with {}: {:.0f} ms to the first token", o.backend,
                 len, shared_desc, shared_ttft);
      } else {
        shared_error = fmt::format("shared prefill with {}: {}", shared_desc, r.message());
      }
    }
    // Evicting policies (stca, h2o) last: a sequence that holds a cached page alone rewrites it
    // in place when it evicts (the store's rule), which takes the prompt out of the cache.
    std::vector<PolicyPtr> order = policies;
    std::stable_partition(order.begin(), order.end(),
                          [&](const PolicyPtr& p) { return !resolve_auto(*p, len).evicts(); });
    for (const PolicyPtr& policy : order) {
      const PolicyConfig resolved = resolve_auto(*policy, len);
      const std::string desc = resolved.describe();
      auto row_of = [&](int32_t b) {
        return nlohmann::json{{"threads", cuda ? 0 : o.threads},
                              {"backend", o.backend},
                              {"mode", "decode_at_depth"},
                              {"prompt_tokens", len},
                              {"policy", desc},
                              {"is_dense", resolved.is_dense()},
                              {"batch", batch_label(b)},
                              {"n_decode", o.n_decode},
                              {"kv_pool_bytes", store_bytes},
                              {"prefill_policy", o.shared_prefill ? shared_desc : desc}};
      };
      auto fail = [&](const std::string& why) {
        log_warn("{} prompt {} {}: {}", o.backend, len, desc, why);
        for (int32_t b : o.batch_seqs) {
          nlohmann::json r = row_of(b);
          r["error"] = why;
          emit(r);
        }
      };
      if (!shared_error.empty()) {
        fail(shared_error);
        continue;
      }
      if (Status st = engine.check_policy(*policy, len); !st) {
        fail(st.message());
        continue;
      }
#ifdef SIEVE_HAVE_CUDA
      if (auto gp = gpu_policy_from(resolved); cuda && gp) {
        if (Status st = gpu_check_length(*gp, model.hp, int64_t{len} + o.n_decode); !st) {
          fail(st.message());
          continue;
        }
      }
#endif
      const std::string salt = o.shared_prefill
                                   ? shared_salt
                                   : fmt::format("bench:{}:{}", len, policy_cache_salt(resolved));
      // The policy's own prefill: its time to first token and what its prompt holds.
      double ttft = shared_ttft;
      // the shared prefill was this policy's own
      bool ttft_own = o.shared_prefill && desc == shared_desc;
      nlohmann::json prefill_facts = nlohmann::json::object();
      if (!o.shared_prefill || (o.own_ttft && !ttft_own)) {
        RequestParams rp = base;
        rp.policy = policy;
        rp.max_tokens = 1;
        rp.cache_salt = fmt::format("bench:{}:{}", len, policy_cache_salt(resolved));
        auto r = run_together(engine, rp, 1);
        if (!r) {
          fail(r.message());
          continue;
        }
        const RequestEvent& ev = r->front().last;
        ttft = ev.ttft_ms;
        ttft_own = true;
        prefill_facts = {{"prefill_cached_tokens", ev.cached_tokens},
                         {"prefill_row_fraction", ev.sparse.prefill_row_fraction()},
                         {"prefill_tokens_dropped", ev.sparse.prefill_dropped},
                         {"kv_bytes_after_prefill", ev.sparse.kv_bytes_held}};
      }
      // What a sequence of this length needs in a store laid out for the policy (kv_layout_for:
      // RTPurbo keeps only sinks + window in layers without a retrieval head). This engine's
      // store has the model's own layout (no default policy), so its sequences may hold more
      // than that; an engine serving the policy by default (`sieve serve --policy`) would not.
      const std::vector<KvCapacity> layout = kv_layout_for(&resolved, model.hp);
      const int64_t layout_bytes =
          kv_budget_bytes(model.hp, int64_t{len} + o.n_decode, 1, ks.page_bytes / ks.token_bytes,
                          sketch_dim, 0, &layout);
      int64_t seq_bytes = 0;  // what one sequence held at its end, in the last batch
      for (int32_t b : o.batch_seqs) {
        nlohmann::json row = row_of(b);
        int32_t n = b;
        if (b == 0) {
          const int64_t need = std::min(seq_bytes, layout_bytes);
          n = static_cast<int32_t>(
              std::clamp<int64_t>(need > 0 ? store_bytes / need : 0, 1, o.fit_cap));
        }
        RequestParams rp = base;
        rp.policy = policy;
        rp.max_tokens = o.n_decode + 1;  // the first token comes with the last page's prefill
        rp.cache_salt = salt;
        std::vector<double> tok_s, step_ms;
        std::vector<SeqRun> last;
        std::string error;
        for (int rep = 1 - o.warmup; rep <= o.reps; ++rep) {
          // An evicting policy's last run took the shared prompt out of the cache: prefill it
          // again once (a cache hit when it is still there) rather than once per sequence.
          if (o.shared_prefill && resolved.evicts()) {
            if (auto pr = run_together(engine, shared_rp, 1); !pr) {
              error = pr.message();
              break;
            }
          }
          auto r = run_together(engine, rp, n);
          if (!r) {
            error = r.message();
            break;
          }
          if (rep <= 0) continue;
          const DecodeFigures f = decode_figures(*r);
          tok_s.push_back(f.tokens / (f.wall_ms / 1000.0));
          step_ms.push_back(f.wall_ms / std::max(1, f.steps));
          last = std::move(*r);
        }
        if (!error.empty()) {
          log_warn("{} prompt {} {} batch {}: {}", o.backend, len, desc, n, error);
          row["error"] = error;
          emit(row);
          continue;
        }
        seq_bytes = 0;
        int32_t cached = len;
        for (const SeqRun& s : last) {
          seq_bytes = std::max(seq_bytes, s.last.sparse.kv_bytes_held);
          cached = std::min(cached, s.last.cached_tokens);
        }
        const SparseStats& ss = last.front().last.sparse;
        const double d = median(tok_s);
        row["batch_seqs"] = n;
        row["decode_tok_s"] = d;
        row["decode_tok_s_per_seq"] = d / n;
        row["step_ms"] = median(step_ms);
        row["reps"] = o.reps;
        row["ttft_ms"] = ttft;
        row["ttft_own"] = ttft_own;
        row["prefill_tok_s"] = ttft > 0 ? len / (ttft / 1000.0) : 0.0;
        row["cached_tokens"] = cached;
        row["selected_fraction"] = ss.selected_fraction();
        row["mean_selected_tokens"] = ss.mean_selected();
        row["cache_hit_rate"] = ss.hit_rate();
        // bytes per sequence and token, and the sequences of this length the pool holds: by the
        // smaller of what one held here and what the policy's own layout needs
        const int64_t need = std::min(seq_bytes, layout_bytes);
        row["kv_bytes_per_seq"] = seq_bytes;
        row["layout_bytes_per_seq"] = layout_bytes;
        row["kv_bytes_per_token"] = static_cast<double>(need) / (len + o.n_decode);
        row["seqs_fit"] = need > 0 ? store_bytes / need : int64_t{0};
        row["seqs_fit_basis"] = layout_bytes < seq_bytes ? "layout" : "measured";
        if (resolved.is_dense()) {
          row["distinct_kv_floor_ms"] =
              1000.0 * static_cast<double>(n) * seq_bytes / static_cast<double>(k_read_bytes_per_s);
        }
        for (auto it = prefill_facts.begin(); it != prefill_facts.end(); ++it) row[it.key()] = *it;
        log_info(
            "{} prompt {} {} batch {}: decode {:.1f} tok/s ({:.2f} ms a step), first token "
            "{:.0f} ms{}, read {:.1f}% of KV, selection cache hits {:.0f}%, {:.1f} KiB per token, "
            "{} such sequences fit in the pool",
            o.backend, len, desc, n, d, median(step_ms), ttft,
            ttft_own ? "" : fmt::format(" (shared prefill, {})", shared_desc),
            100 * ss.selected_fraction(), 100 * ss.hit_rate(),
            row["kv_bytes_per_token"].get<double>() / 1024.0, row["seqs_fit"].get<int64_t>());
        emit(row);
      }
    }
  }
  for (const auto& [item, why] : o.refused) {
    for (int32_t len : o.lengths) {
      for (int32_t b : o.batch_seqs) {
        emit({{"threads", cuda ? 0 : o.threads},
              {"backend", o.backend},
              {"mode", "decode_at_depth"},
              {"prompt_tokens", len},
              {"policy", item},
              {"batch", batch_label(b)},
              {"error", why}});
      }
    }
  }
  add_ratios(rows);
  for (auto& r : rows) results.push_back(r);
}

}  // namespace sieve::cli

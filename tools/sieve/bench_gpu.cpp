#include "bench_gpu.h"

#include <algorithm>
#include <chrono>

#include "backend.h"
#include "command.h"
#include "core/log.h"
#include "engine/sampler.h"

#ifdef SIEVE_HAVE_CUDA
#include <fmt/format.h>

#include "gpu/gpu_generate.h"
#endif

namespace sieve::cli {

#ifdef SIEVE_HAVE_CUDA
void run_gpu_bench(const Model& model, const std::vector<int32_t>& prompt,
                   const std::vector<PolicyPtr>& policies, const GpuBenchOptions& o,
                   nlohmann::json& results, std::string& device) {
  int32_t max_len = 0;
  for (int32_t l : o.lengths) max_len = std::max(max_len, l);
  const int32_t n_ctx = max_len + o.n_decode + 1;
  // Every (policy, length) is resolved and checked before the first runs, so a bad pair costs
  // no rows.
  struct Row {
    int32_t len;
    PolicyConfig resolved;
    GpuPolicy gp;
  };
  std::vector<Row> rows;
  for (const PolicyPtr& policy : policies) {
    for (int32_t len : o.lengths) {
      PolicyConfig resolved = resolve_auto(*policy, len);
      auto gp = gpu_policy_from(resolved);
      if (!gp) throw UserError(gp.message());
      if (Status st = gpu_check_length(*gp, model.hp, int64_t{len} + o.n_decode); !st)
        throw UserError(fmt::format("{} (policy {}, --lengths {} with --n-decode {})", st.message(),
                                    policy->describe(), len, o.n_decode));
      rows.push_back({len, std::move(resolved), *gp});
    }
  }
  GpuRunner gpu(model, n_ctx);  // the weights are uploaded once per GPU policy
  for (const auto& [len, resolved, gp] : rows) {
    GpuSession& s = gpu.session(gp);
    device = fmt::format("{} (bf16 weights {:.2f} GiB; dense prefill attention: {})", s.device_name(),
                         s.weight_bytes() / 1073741824.0, s.prefill_kernel());
    std::vector<double> pf, dc;
    GpuStats decode_stats;
    std::vector<float> logits;
    for (int rep = 1 - o.warmup; rep <= o.reps; ++rep) {
      s.reset();
      const auto t0 = std::chrono::steady_clock::now();
      if (Status st = s.prefill(std::span(prompt.data(), len), logits); !st)
        throw UserError(st.message());
      const auto t1 = std::chrono::steady_clock::now();
      int32_t tok = argmax(logits);
      for (int32_t g = 0; g < o.n_decode; ++g) {
        const int32_t one[1] = {tok};
        if (Status st = s.step(one, logits); !st) throw UserError(st.message());
        tok = argmax(logits);
      }
      const auto t2 = std::chrono::steady_clock::now();
      decode_stats = s.stats();  // its decode fields count the decode steps only
      if (rep <= 0) continue;
      pf.push_back(len / std::chrono::duration<double>(t1 - t0).count());
      dc.push_back(o.n_decode / std::chrono::duration<double>(t2 - t1).count());
    }
    std::sort(pf.begin(), pf.end());
    std::sort(dc.begin(), dc.end());
    const double p = pf[pf.size() / 2], d = dc[dc.size() / 2];
    nlohmann::json r = {
        {"threads", 0},
        {"backend", "cuda"},
        {"prompt_tokens", len},
        {"prefill_tok_s", p},
        {"ttft_ms", 1000.0 * len / p},
        {"decode_tok_s", d},
        {"n_decode", o.n_decode},
        {"policy", resolved.describe()},
        {"gpu_policy", gp.sparse
                           ? fmt::format("tokenselect top_k={} sinks={} local={} vote={} cache={}", gp.top_k,
                                         gp.sinks, gp.local, gp.layer_vote ? "layer" : "group",
                                         gp.selection_cache ? fmt::format("theta {:g}", gp.theta) : "off")
                           : std::string("dense")},
        {"kv_bytes", s.kv_bytes()},
        {"selected_fraction", decode_stats.fraction_read()},
        {"mean_selected_tokens", decode_stats.mean_selected()},
        {"cache_hit_rate", decode_stats.cache_lookups
                               ? double(decode_stats.cache_hits) / double(decode_stats.cache_lookups)
                               : 0.0}};
    log_info(
        "cuda prompt {} {}: prefill {:.0f} tok/s ({:.1f} ms), decode {:.1f} tok/s, read {:.1f}% of "
        "KV, selection cache hits {:.0f}%",
        len, resolved.describe(), p, 1000.0 * len / p, d, 100 * decode_stats.fraction_read(),
        decode_stats.cache_lookups ? 100.0 * decode_stats.cache_hits / decode_stats.cache_lookups : 0.0);
    results.push_back(r);
  }
}
#else
void run_gpu_bench(const Model&, const std::vector<int32_t>&, const std::vector<PolicyPtr>&,
                   const GpuBenchOptions&, nlohmann::json&, std::string&) {
  throw UserError(k_no_cuda_error);
}
#endif

}  // namespace sieve::cli

#include "bench_gpu.h"

#include <algorithm>
#include <chrono>

#include "backend.h"
#include "command.h"
#include "core/log.h"
#include "engine/sampler.h"

#ifdef SIEVE_HAVE_CUDA
#include <fmt/format.h>

#include "gpu/gpu_policy.h"
#endif

namespace sieve::cli {

#ifdef SIEVE_HAVE_CUDA
void run_gpu_bench(const Model& model, const std::vector<int32_t>& prompt,
                   const std::vector<PolicyPtr>& policies, const GpuBenchOptions& o,
                   nlohmann::json& results, std::string& device) {
  int32_t max_len = 0;
  for (int32_t l : o.lengths) max_len = std::max(max_len, l);
  const int32_t n_ctx = max_len + o.n_decode;  // the KV's tokens (the last one is not written)
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
  // One engine for every row: the weights are uploaded once; no prefix cache, so every
  // repetition prefills its whole prompt.
  SequenceEngineOptions so;
  so.n_ctx = n_ctx;
  so.prefix_cache = false;
  auto gpu = make_sequence_engine(model, "cuda", so);
  device = device_of(*gpu);
  for (const auto& [len, resolved, gp] : rows) {
    std::vector<double> pf, dc;
    GenerateStats last;
    GenerateOptions g;
    g.n_predict = o.n_decode + 1;  // the first token comes with the prefill
    g.stop_at_eog = false;
    g.sampling.temperature = 0.0f;
    g.policy = std::make_shared<const PolicyConfig>(resolved);
    for (int rep = 1 - o.warmup; rep <= o.reps; ++rep) {
      last =
          generate_or_throw(*gpu, std::span(prompt.data(), len), g, [](int32_t) { return true; });
      if (rep <= 0) continue;
      pf.push_back(len / (last.prefill_ms / 1000.0));
      dc.push_back(o.n_decode / (last.decode_ms / 1000.0));
    }
    std::sort(pf.begin(), pf.end());
    std::sort(dc.begin(), dc.end());
    const double p = pf[pf.size() / 2], d = dc[dc.size() / 2];
    const SparseStats& ss = last.sparse;
    nlohmann::json r = {
        {"threads", 0},
        {"backend", "cuda"},
        {"prompt_tokens", len},
        {"prefill_tok_s", p},
        {"ttft_ms", 1000.0 * len / p},
        {"decode_tok_s", d},
        {"n_decode", o.n_decode},
        {"policy", resolved.describe()},
        {"gpu_policy",
         gp.sparse ? fmt::format("tokenselect top_k={} sinks={} local={} vote={} cache={}",
                                 gp.top_k, gp.sinks, gp.local, gp.layer_vote ? "layer" : "group",
                                 gp.selection_cache ? fmt::format("theta {:g}", gp.theta) : "off")
                   : std::string("dense")},
        {"kv_bytes", int64_t{len + o.n_decode} * last.kv_bytes_per_token_full},
        {"selected_fraction", ss.selected_fraction()},
        {"mean_selected_tokens", ss.mean_selected()},
        {"cache_hit_rate", ss.hit_rate()}};
    log_info(
        "cuda prompt {} {}: prefill {:.0f} tok/s ({:.1f} ms), decode {:.1f} tok/s, read {:.1f}% of "
        "KV, selection cache hits {:.0f}%",
        len, resolved.describe(), p, 1000.0 * len / p, d, 100 * ss.selected_fraction(),
        100.0 * ss.hit_rate());
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

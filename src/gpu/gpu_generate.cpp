#include "gpu/gpu_generate.h"

#include <chrono>

#include "core/log.h"
#include "engine/sampler.h"

namespace sieve {

Result<GpuPolicy> gpu_policy_for(const PolicyPtr& policy, int64_t prompt_tokens) {
  if (!policy) return GpuPolicy{};
  const PolicyConfig p = policy->preset == "auto" ? resolve_auto(*policy, prompt_tokens) : *policy;
  return gpu_policy_from(p);
}

Result<GenerateStats> generate_on_gpu(GpuSession& session, const Model& model, std::span<const int32_t> prompt,
                                      const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  if (prompt.empty()) return make_error("the prompt is empty");
  session.reset();
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  st.policy = session.policy().name;
  std::vector<float> logits;
  const auto t0 = clock::now();
  SIEVE_TRY(session.prefill(prompt, logits, opt.on_prefill_progress));
  const auto t1 = clock::now();
  st.prefill_ms = ms(t0, t1);
  Sampler sampler(opt.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  auto t_dec = clock::now();
  for (int32_t i = 0; i < opt.n_predict; ++i) {
    const int32_t t = sampler.sample(logits, history);
    history.push_back(t);
    ++st.completion_tokens;
    if (opt.stop_at_eog && model.tokenizer->is_eog(t)) {
      st.stopped_by_eog = true;
      break;
    }
    if (!on_token(t)) break;
    if (i + 1 == opt.n_predict) break;
    if (Status room = session.fits(1); !room) {  // the context (or TokenSelect's trained length) is full
      log_warn("generation stopped after {} tokens: {}", st.completion_tokens, room.message());
      break;
    }
    const int32_t one[1] = {t};
    SIEVE_TRY(session.step(one, logits));
  }
  st.decode_ms = ms(t_dec, clock::now());
  const GpuStats& gs = session.stats();
  st.kv_bytes = session.kv_bytes();
  st.n_layers_full = model.hp.n_layer;
  st.kv_bytes_per_token_full = session.kv_bytes_per_token();
  st.sparse.layer_steps = gs.sparse_layer_steps + gs.dense_layer_steps;  // decode only (GpuStats)
  st.sparse.selected_tokens = static_cast<int64_t>(gs.keys_read);
  st.sparse.context_tokens = static_cast<int64_t>(gs.keys_total);
  st.sparse.selections = gs.sparse_layer_steps - gs.cache_hits;
  st.sparse.cache_lookups = gs.cache_lookups;
  st.sparse.cache_hits = gs.cache_hits;
  st.sparse.bytes_read = st.sparse.selected_tokens * int64_t{model.hp.kv_dim()} * 2 * 2;
  st.sparse.kv_bytes_held = st.kv_bytes;
  return st;
}

}  // namespace sieve

#include "engine/generate.h"

#include <chrono>

namespace sieve {
namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Generator::Generator(const Model& model, ThreadPool& pool, int32_t n_ctx)
    : model_(model), pool_(pool), n_ctx_(n_ctx), fwd_(model, pool) {}

Result<GenerateStats> Generator::generate(std::span<const int32_t> prompt,
                                          const GenerateOptions& opt,
                                          const std::function<bool(int32_t)>& on_token) {
  GenerateStats st;
  if (prompt.empty()) return make_error("the prompt is empty; give some text with -p or -f");
  if (static_cast<int64_t>(prompt.size()) > n_ctx_) {
    return make_error(
        "the prompt has {} tokens, more than the context size {}; shorten it or raise -c (the "
        "model was trained with {} tokens)",
        prompt.size(), n_ctx_, model_.hp.n_ctx_train);
  }
  SIEVE_TRY(validate(opt.sampling));
  if (opt.n_batch <= 0) return make_error("batch size {} must be positive", opt.n_batch);
  ContiguousKv kv(model_.hp, n_ctx_);
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t i = 0; i < n; i += opt.n_batch) {
    const int64_t m = std::min<int64_t>(opt.n_batch, n - i);
    BatchEntry e;
    e.kv = &kv;
    e.tokens = prompt.subspan(i, m);
    SIEVE_TRY(fwd_.run(std::span<const BatchEntry>(&e, 1), logits));
    if (opt.on_prefill_progress) opt.on_prefill_progress(i + m, n);
  }
  st.prefill_ms = ms_since(t0);
  st.prompt_tokens = n;

  Sampler sampler(opt.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const auto t1 = std::chrono::steady_clock::now();
  for (int32_t g = 0; g < opt.n_predict; ++g) {
    const int32_t tok = sampler.sample(logits, history);
    history.push_back(tok);
    st.completion_tokens++;
    if (opt.stop_at_eog && model_.tokenizer->is_eog(tok)) {
      st.stopped_by_eog = true;
      break;
    }
    if (!on_token(tok)) break;
    if (g + 1 == opt.n_predict || kv.n_tokens() >= n_ctx_) break;
    BatchEntry e;
    e.kv = &kv;
    e.tokens = std::span<const int32_t>(&history.back(), 1);
    SIEVE_TRY(fwd_.run(std::span<const BatchEntry>(&e, 1), logits));
  }
  st.decode_ms = ms_since(t1);
  st.kv_bytes = kv.bytes();
  return st;
}

Result<std::vector<float>> Generator::prompt_logits(std::span<const int32_t> prompt,
                                                    int32_t n_batch) {
  if (static_cast<int64_t>(prompt.size()) > n_ctx_) return make_error("prompt longer than the context");
  ContiguousKv kv(model_.hp, n_ctx_);
  std::vector<float> all, logits;
  for (size_t i = 0; i < prompt.size(); i += n_batch) {
    BatchEntry e;
    e.kv = &kv;
    e.tokens = prompt.subspan(i, std::min<size_t>(n_batch, prompt.size() - i));
    e.all_logits = true;
    SIEVE_TRY(fwd_.run(std::span<const BatchEntry>(&e, 1), logits));
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace sieve

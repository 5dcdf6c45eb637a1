// The in-process runner: the engine on the CPU runner, one sample at a time, greedy.
#include <cctype>

#include "engine/engine_generate.h"
#include "eval/runner.h"

namespace sieve::eval {
namespace {

class LocalRunner final : public Runner_i {
 public:
  LocalRunner(const Model& model, ThreadPool& pool, const LocalRunnerOptions& opt)
      : model_(model), pool_(pool), opt_(opt) {}

  std::string backend() const override { return "local"; }

  Result<Completion> complete(const CompletionRequest& r) override {
    SIEVE_TRY(check_request(r, opt_.n_ctx));
    // The engine keeps its KV store (and so its prefix cache) across calls of one policy when
    // that cannot change results; otherwise every request gets a fresh one.
    const std::string label = policy_label(r.policy);
    const bool reuse =
        opt_.prefix_cache && label == gen_policy_ && policy_allows_prefix_reuse(r.policy);
    if (!gen_ || !reuse) {
      gen_.reset();  // free the old store before the new one is allocated
      SequenceEngineConfig sc;
      sc.n_ctx = opt_.n_ctx;
      sc.n_batch = opt_.n_batch;
      sc.pool = &pool_;
      auto e =
          SequenceEngine::create(std::shared_ptr<const Model>(&model_, [](const Model*) {}), sc);
      if (!e) return e.error();
      gen_ = std::move(*e);
      gen_policy_ = label;
    }
    GenerateOptions g;
    g.n_predict = r.max_new_tokens;
    g.n_batch = opt_.n_batch;
    g.sampling.temperature = 0.0f;  // greedy: argmax, ties to the lowest id
    g.policy = r.policy;
    std::vector<int32_t> out;
    std::string text;
    auto st = gen_->generate(r.tokens, g, [&](int32_t t) {
      out.push_back(t);
      return answer_continues(model_, r, text, t);
    });
    if (!st) {
      gen_.reset();  // a failed step may leave the store in any state
      return st.error();
    }
    Completion c = completion_of(model_, r, out, *st);
    c.reused_tokens = st->cached_tokens;
    c.prefill_tokens = st->prompt_tokens - st->cached_tokens;
    return c;
  }

 private:
  const Model& model_;
  ThreadPool& pool_;
  LocalRunnerOptions opt_;
  std::unique_ptr<SequenceEngine> gen_;
  std::string gen_policy_;  // the policy label gen_'s store was filled under
};

}  // namespace

Status check_request(const CompletionRequest& r, int32_t n_ctx) {
  if (r.tokens.empty()) return make_error("empty prompt");
  if (static_cast<int64_t>(r.tokens.size()) + r.max_new_tokens > n_ctx) {
    return make_error("prompt of {} tokens plus {} to generate exceeds the runner's context {}",
                      r.tokens.size(), r.max_new_tokens, n_ctx);
  }
  return {};
}

bool answer_continues(const Model& model, const CompletionRequest& r, std::string& text,
                      int32_t t) {
  if (!r.stop_at_newline) return true;
  text += model.tokenizer->token_to_piece(t);
  return answer_line_end(text) == std::string::npos;
}

Completion completion_of(const Model& model, const CompletionRequest& r,
                         std::span<const int32_t> out, const GenerateStats& st) {
  Completion c;
  c.text = model.tokenizer->decode(out);
  if (r.stop_at_newline) c.text = c.text.substr(0, answer_line_end(c.text));
  c.prompt_tokens = st.prompt_tokens;
  c.prefill_tokens = st.prompt_tokens;
  c.completion_tokens = st.completion_tokens;
  c.prefill_ms = st.prefill_ms;
  c.decode_ms = st.decode_ms;
  c.selected_fraction = st.sparse.selected_fraction();
  c.mean_selected = st.sparse.layer_steps > 0 ? st.sparse.mean_selected() : -1;
  c.policy = st.policy;
  return c;
}

size_t answer_line_end(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (std::isalnum(static_cast<unsigned char>(text[i]))) return text.find('\n', i);
  }
  return std::string_view::npos;
}

std::unique_ptr<Runner_i> make_local_runner(const Model& model, ThreadPool& pool,
                                            const LocalRunnerOptions& opt) {
  return std::make_unique<LocalRunner>(model, pool, opt);
}

}  // namespace sieve::eval

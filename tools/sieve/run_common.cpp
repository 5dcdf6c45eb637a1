#include "run_common.h"

#include "sparse/policy_builder.h"

#include "core/log.h"
#include "model_cache.h"

namespace sieve::cli {

SamplerParams SamplingFlags::params() const {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repeat_penalty = repeat_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.seed = seed;
  Status s = validate(p);
  if (!s) throw UserError(s.message());
  return p;
}

void add_model_flags(CLI::App& app, ModelOptions& o) {
  app.add_option("-m,--model", o.model, "GGUF file or known model name (default: smollm2)");
  app.add_option("-c,--ctx-size", o.n_ctx, "context size in tokens (default: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("-t,--threads", o.threads, "CPU threads (default: all)")->check(CLI::Range(0, 1024));
}

void add_sampling_flags(CLI::App& app, SamplingFlags& s) {
  app.add_option("--temp", s.temp, "temperature (0 = greedy, the default)");
  app.add_option("--top-k", s.top_k, "top-k (0 = off)");
  app.add_option("--top-p", s.top_p, "top-p nucleus mass");
  app.add_option("--min-p", s.min_p, "min-p relative floor");
  app.add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (1 = off)");
  app.add_option("--presence-penalty", s.presence_penalty, "presence penalty");
  app.add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty");
  app.add_option("--seed", s.seed, "random seed (same seed, same output)");
}

void add_policy_flags(CLI::App& app, PolicyFlags& p) {
  std::string names;
  for (std::string_view n : policy_presets()) names += (names.empty() ? "" : ", ") + std::string(n);
  app.add_option("--policy", p.name,
                 "attention policy NAME or NAME:key=value:... (as sieve eval): " + names + " (auto: " +
                     std::string(auto_sparse_preset()) + " at decode, dense prefill, from " + std::to_string(auto_min_prompt()) +
                     " prompt tokens, dense below)");
  app.add_option("--policy-file", p.file, "policy file: JSON object or key = value lines");
  app.add_option("--set", p.sets, "policy knob key=value (repeatable; see docs/sparse.md)");
  app.add_option("--head-plan", p.head_plan,
                 "rtpurbo: head plan from `sieve calibrate` (same as --set head_plan=FILE)");
}

LoadedModel load_for_run(const ModelOptions& o) {
  LoadedModel lm;
  lm.path = resolve_model(o.model, /*pull_if_missing=*/o.model.empty() || find_known_model(o.model));
  auto m = load_model(lm.path);
  if (!m) throw UserError(m.message());
  lm.model = std::move(m.value());
  lm.n_ctx = o.n_ctx > 0 ? o.n_ctx : lm.model->hp.n_ctx_train;
  if (lm.n_ctx > lm.model->hp.n_ctx_train) {
    log_warn("context {} is beyond the {} tokens the model was trained with; quality may drop",
             lm.n_ctx, lm.model->hp.n_ctx_train);
  }
  lm.pool = std::make_unique<ThreadPool>(o.threads > 0 ? o.threads : hardware_threads());
  return lm;
}

PolicyPtr policy_from_flags(const PolicyFlags& p) {
  PolicySources src;
  src.item = p.name;  // NAME:key=value:... as sieve eval takes it; the inline knobs apply after --set
  src.file = p.file;
  src.head_plan = p.head_plan;
  src.sets = p.sets;
  auto r = build_policy(src);
  if (!r) throw UserError(r.message());
  return std::make_shared<const PolicyConfig>(std::move(r.value()));
}

std::string build_prompt_text(const Model& m, const std::string& document,
                              const std::string& question, bool chat) {
  std::string user;
  if (!document.empty() && !question.empty()) {
    user = document + "\n\n" + (chat ? "" : "Question: ") + question;
  } else {
    user = document.empty() ? question : document;
  }
  if (!chat) return (!document.empty() && !question.empty()) ? user + "\nAnswer:" : user;
  std::vector<ChatMessage> msgs = {{"user", user}};
  auto r = apply_chat_template(*m.tokenizer, msgs, true);
  if (!r) throw UserError(r.message());
  return *r;
}

}  // namespace sieve::cli

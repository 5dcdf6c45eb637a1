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
  app.add_option("-t,--threads", o.threads, "CPU threads (default: all)")
      ->check(CLI::Range(0, 1024));
  add_rope_flags(app, o);
}

void add_rope_flags(CLI::App& app, ModelOptions& o) {
  app.add_option("--rope-scaling", o.rope_scaling,
                 "RoPE scaling: none, linear or yarn (default: the model's rope.scaling.type)")
      ->check(CLI::IsMember({"none", "linear", "yarn"}));
  app.add_option("--rope-scale", o.rope_scale,
                 "RoPE context extension factor N (Qwen2.5 with yarn: 4 for 128K)")
      ->check(CLI::Range(0.0f, 1024.0f));
  app.add_option(
         "--yarn-orig-ctx", o.yarn_orig_ctx,
         "YaRN: the model's original context (default: the file's, else its training context)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--yarn-ext-factor", o.yarn_ext_factor,
                 "YaRN extrapolation mix (default 1 for yarn)");
  app.add_option("--yarn-attn-factor", o.yarn_attn_factor, "YaRN magnitude factor (default 1)");
  app.add_option("--yarn-beta-fast", o.yarn_beta_fast, "YaRN high-frequency corner (default 32)");
  app.add_option("--yarn-beta-slow", o.yarn_beta_slow, "YaRN low-frequency corner (default 1)");
}

void apply_rope_flags(const ModelOptions& o, Model& m) {
  RopeScaling s = m.hp.rope_scaling;
  const bool set_type = !o.rope_scaling.empty();
  const bool any = set_type || o.rope_scale > 0 || o.yarn_orig_ctx > 0 || o.yarn_ext_factor >= 0 ||
                   o.yarn_attn_factor >= 0 || o.yarn_beta_fast >= 0 || o.yarn_beta_slow >= 0;
  if (!any) return;
  if (set_type) {
    const RopeScalingType t = o.rope_scaling == "yarn"     ? RopeScalingType::yarn
                              : o.rope_scaling == "linear" ? RopeScalingType::linear
                                                           : RopeScalingType::none;
    if (t != s.type) s.ext_factor = t == RopeScalingType::yarn ? 1.0f : 0.0f;
    s.type = t;
  } else if (o.rope_scale > 0 && s.type == RopeScalingType::none) {
    s.type = RopeScalingType::linear;  // llama.cpp: a scale without a type is linear
  }
  if (o.rope_scale > 0) s.factor = o.rope_scale;
  if (o.yarn_orig_ctx > 0) s.n_ctx_orig = o.yarn_orig_ctx;
  if (s.n_ctx_orig <= 0) s.n_ctx_orig = m.hp.n_ctx_train;
  if (o.yarn_ext_factor >= 0) s.ext_factor = o.yarn_ext_factor;
  if (o.yarn_attn_factor >= 0) s.attn_factor = o.yarn_attn_factor;
  if (o.yarn_beta_fast >= 0) s.beta_fast = o.yarn_beta_fast;
  if (o.yarn_beta_slow >= 0) s.beta_slow = o.yarn_beta_slow;
  if (Status st = set_rope_scaling(m.hp, s); !st) throw UserError(st.message());
  const RopeScaling& r = m.hp.rope_scaling;
  if (!r.active()) {
    log_info("rope scaling: none");
    return;
  }
  log_info(
      "rope scaling: {} x{} from {} tokens (ext_factor {}, beta {}/{}, mscale {:.4f}): context up "
      "to {}",
      r.type == RopeScalingType::yarn ? "yarn" : "linear", r.factor, r.n_ctx_orig, r.ext_factor,
      r.beta_fast, r.beta_slow, r.mscale(), m.hp.n_ctx_max());
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
                 "attention policy NAME or NAME:key=value:... (as sieve eval): " + names +
                     " (auto: " + std::string(auto_sparse_preset()) +
                     " at decode, dense prefill, from " + std::to_string(auto_min_prompt()) +
                     " prompt tokens, dense below)");
  app.add_option("--policy-file", p.file, "policy file: JSON object or key = value lines");
  app.add_option("--set", p.sets, "policy knob key=value (repeatable; see docs/sparse.md)");
  app.add_option("--head-plan", p.head_plan,
                 "rtpurbo: head plan from `sieve calibrate` (same as --set head_plan=FILE)");
}

LoadedModel load_for_run(const ModelOptions& o) {
  LoadedModel lm;
  lm.path =
      resolve_model(o.model, /*pull_if_missing=*/o.model.empty() || find_known_model(o.model));
  auto m = load_model(lm.path);
  if (!m) throw UserError(m.message());
  lm.model = std::move(m.value());
  apply_rope_flags(o, *lm.model);
  const int32_t n_ctx_max = lm.model->hp.n_ctx_max();
  lm.n_ctx = o.n_ctx > 0 ? o.n_ctx : n_ctx_max;
  if (lm.n_ctx > n_ctx_max) {
    log_warn("context {} is beyond the {} tokens the model was trained with{}; quality may drop",
             lm.n_ctx, n_ctx_max,
             lm.model->hp.rope_scaling.active() ? " (RoPE scaling included)"
                                                : " (see --rope-scaling yarn)");
  }
  lm.pool = std::make_unique<ThreadPool>(o.threads > 0 ? o.threads : hardware_threads());
  return lm;
}

PolicyPtr policy_from_flags(const PolicyFlags& p) {
  PolicySources src;
  src.item =
      p.name;  // NAME:key=value:... as sieve eval takes it; the inline knobs apply after --set
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

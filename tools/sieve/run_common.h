// Flags and set-up shared by the commands that run a model (run, bench, eval, serve...).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace sieve::cli {

struct ModelOptions {
  std::string model;    // -m: path or known name ("" = default)
  int32_t n_ctx = 0;    // -c: 0 = the model's trained context (stretched by RoPE scaling)
  int32_t threads = 0;  // -t: 0 = all hardware threads
  // RoPE scaling as llama.cpp's flags; unset values keep the GGUF's (rope.scaling.*).
  std::string rope_scaling;   // --rope-scaling none|linear|yarn
  float rope_scale = 0;       // --rope-scale N: context extension factor
  int32_t yarn_orig_ctx = 0;  // --yarn-orig-ctx N: 0 = the file's (or its training context)
  float yarn_ext_factor = -1, yarn_attn_factor = -1, yarn_beta_fast = -1, yarn_beta_slow = -1;
};

struct SamplingFlags {
  float temp = 0.0f;  // greedy unless asked (answers about documents should be reproducible)
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0xC0FFEE;
  SamplerParams params() const;
};

struct PolicyFlags {
  std::string name = "auto";
  std::string file;               // --policy-file
  std::vector<std::string> sets;  // --set key=value (applied after the file)
  std::string head_plan;          // --head-plan FILE: --set head_plan=FILE (rtpurbo)
};

struct LoadedModel {
  std::string path;
  std::unique_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  int32_t n_ctx = 0;
};

void add_model_flags(CLI::App& app, ModelOptions& o);
// The RoPE scaling flags alone (commands that take their models another way: eval).
void add_rope_flags(CLI::App& app, ModelOptions& o);
void add_sampling_flags(CLI::App& app, SamplingFlags& s);
void add_policy_flags(CLI::App& app, PolicyFlags& p);

// Applies the --rope-scaling/--rope-scale/--yarn-* flags to a loaded model (logs the
// result; a bad combination is a UserError). load_for_run calls it; so must any command that
// loads the model itself.
void apply_rope_flags(const ModelOptions& o, Model& m);

// Resolves -m (pulling the default model if absent), loads it, makes the thread pool.
LoadedModel load_for_run(const ModelOptions& o);
// The policy the flags describe; unknown names, knobs and bad values are a UserError that
// lists the valid ones.
PolicyPtr policy_from_flags(const PolicyFlags& p);
inline void check_policy(const PolicyFlags& p) {
  (void)policy_from_flags(p);
}
// Document + question -> prompt text (chat template when chat).
std::string build_prompt_text(const Model& m, const std::string& document,
                              const std::string& question, bool chat);

}  // namespace sieve::cli

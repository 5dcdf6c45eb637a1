// Generation on the CUDA backend: prompt -> prefill chunks -> sampled tokens, one sequence,
// reported in the engine's GenerateStats (sieve run / bench --backend cuda).
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "core/result.h"
#include "engine/generate.h"
#include "gpu/gpu_session.h"

namespace sieve {

// The session for opt.policy (auto resolved against the prompt length): create it once per
// policy and reuse it across prompts.
Result<GpuPolicy> gpu_policy_for(const PolicyPtr& policy, int64_t prompt_tokens);

// Runs one request on `session` (reset first). on_token(id) returns false to stop.
Result<GenerateStats> generate_on_gpu(GpuSession& session, const Model& model, std::span<const int32_t> prompt,
                                      const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token);

}  // namespace sieve

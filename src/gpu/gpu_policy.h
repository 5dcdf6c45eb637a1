// What the CUDA backend runs of a sparse policy, decided from the policy's knob values (never
// its preset name): dense attention, or TokenSelect's decode selection (exact paged q.K, the
// head soft vote, top-k, sinks + selection + window) with its selection cache and chunk
// prefill. A knob value the backend cannot run is one error naming the knob.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "model/hparams.h"
#include "sparse/policy.h"

namespace sieve {

struct GpuPolicy {
  bool sparse = false;  // TokenSelect decode (else dense)
  bool layer_vote =
      true;  // one selection per layer (soft votes of every head summed), else per KV head
  int32_t top_k = 2048;       // selected tokens besides sinks and window
  int32_t sinks = 128;        // first tokens, always read
  int32_t local = 512;        // most recent tokens before the query, always read
  bool chunk_prefill = true;  // prefill chunks attend to one selection from the chunk's mean query
  int32_t prefill_tail = 0;   // chunks reaching into the prompt's last N tokens attend densely
  int32_t chunk_from = 0;     // prompts shorter than this prefill densely (auto: 65536)
  // positions=auto: the CPU renumbers selected tokens (compact positions) once a sequence passes
  // the model's trained context; the GPU has no compact positions, so such a sequence is an
  // error there (positions=original runs on)
  bool compact_beyond_train = false;
  // TokenSelect's Selection Cache at decode: reuse a layer's selection while the query's
  // fingerprint keeps cosine >= theta with the one it was made for (scope=layer only)
  bool selection_cache = false;
  float theta = 0.9f;
  std::string name = "dense";
  bool operator==(const GpuPolicy&) const = default;
  // Whether a sequence whose tokens before the query number `before` attends to a selection.
  bool selects(int64_t before) const { return sparse && before - sinks - local > top_k; }
};

// auto's chunk prefill starts here on the GPU (SmolLM2: 1.07x dense at 64K, 1.73x at 128K).
inline constexpr int32_t k_gpu_auto_chunk_from = 65536;

// The GPU form of a (resolved) policy, or an error naming the knob the CUDA backend cannot run.
Result<GpuPolicy> gpu_policy_from(const PolicyConfig& p);
// Whether a sequence of len tokens runs under pol on the GPU at all (TokenSelect's compact
// positions past the trained context do not).
Status gpu_check_length(const GpuPolicy& pol, const ModelHParams& hp, int64_t len);

}  // namespace sieve

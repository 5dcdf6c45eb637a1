// A generation request as the scheduler sees it, and the events it streams back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "sparse/policy.h"
#include "sparse/stats.h"

namespace sieve {

using RequestId = uint64_t;

enum class FinishReason { none, stop, length, cancelled, error };
const char* finish_reason_name(FinishReason r);

struct RequestParams {
  std::vector<int32_t> prompt;  // token ids (BOS included when the model wants one)
  int32_t max_tokens = 256;     // generated tokens at most
  SamplerParams sampling;
  bool stop_at_eog = true;        // end-of-generation tokens finish the request
  std::vector<std::string> stop;  // stop strings (may span tokens; never emitted)
  bool logprobs = false;          // log-probability of each generated token
  int32_t n_logprobs = 0;         // and of the top n alternatives (0: none)
  // Log-probability of every prompt token after the first (with n_logprobs alternatives), as
  // OpenAI's echo reports them. The prompt is then computed whole: no prefix-cache hits.
  bool prompt_logprobs = false;
  PolicyPtr policy;  // sparse attention policy; nullptr: the engine's default
  // The policy the prompt is prefilled with, when not `policy` (sieve bench --dense-prefill:
  // a UniPrefill prefill before dense decode); nullptr: `policy`.
  PolicyPtr prefill_policy;
  // Called on the engine's thread after each prefill chunk: (prompt tokens in the KV, prompt
  // tokens). A progress line; must not block.
  std::function<void(int64_t, int64_t)> on_prefill;
  int32_t priority = 0;  // lower runs first (admission, prefill order); ties: arrival
  // The prefix-cache namespace of this request's pages. Unset: its policy's
  // (policy_cache_salt), so a request reuses only K/V computed the way its own policy would
  // compute them. `sieve bench --batch-seqs --shared-prefill` sets one salt for every policy
  // so that all of them decode over one prefill: decode speed does not depend on the values
  // the keys hold.
  std::optional<std::string> cache_salt;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// The log-probability of one token given the tokens before it, with the top alternatives.
struct PromptLogprob {
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

// One event per generated token, then a final one (finished = true).
struct RequestEvent {
  RequestId id = 0;
  int32_t token = -1;             // -1 on the final event
  std::string text;               // text released by this event (stop strings held back)
  float logprob = 0;              // of `token`
  std::vector<TokenLogprob> top;  // n_logprobs alternatives
  // With prompt_logprobs, on the first event (a token's or the final one): entry k is prompt
  // token k + 1's (the first token has none) [n_prompt - 1].
  std::vector<PromptLogprob> prompt_logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::none;
  std::string error;  // when reason == error
  // When reason == error: "" for the engine's own failure (a server's 500), else the request
  // cannot run as given (a 400) and this is its OpenAI-style code: "context_length_exceeded"
  // (the prompt does not fit the context or the whole KV pool) or "invalid_request".
  std::string error_code;
  // Totals, on the final event.
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens served by the prefix cache
  int32_t completion_tokens = 0;
  double ttft_ms = 0;   // submit -> first token
  double queue_ms = 0;  // submit -> first admission (KV reserved, prefill may start)
  int32_t n_preempted = 0;
  std::string policy;  // the policy that ran (PolicyConfig::describe())
  // The sparse policy's statistics so far (a token event: the decode policy's; the final
  // event: the request's totals, a prefill_policy's included).
  SparseStats sparse;
};

using RequestCallback = std::function<void(const RequestEvent&)>;

}  // namespace sieve

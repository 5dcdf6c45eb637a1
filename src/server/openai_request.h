// Parsing and validation of /v1/completions and /v1/chat/completions bodies. Every field is
// type-checked and range-checked here, at the edge; a bad field throws ApiError naming the
// field (param) and the valid range. Unknown fields are ignored (as vLLM does); fields this
// server cannot honour (n > 1, echo, logit_bias, tools, ...) are rejected, not ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "model/tokenizer.h"
#include "server/api_error.h"

namespace sieve::server {

struct RequestLimits {
  int32_t n_ctx = 2048;           // per-request context
  int32_t n_vocab = 0;            // token ids must be in [0, n_vocab)
  int32_t max_tokens = 2048;      // largest max_tokens accepted
  int32_t max_logprobs = 20;      // logprobs / top_logprobs
  int32_t max_stop = 16;          // stop strings
  int32_t max_stop_bytes = 1024;  // bytes of one stop string
  int32_t max_messages = 4096;
  int32_t json_max_depth = 64;        // nesting of the whole body
  int32_t max_prompts = 64;           // prompts of one /v1/completions request (choices)
  int64_t max_json_values = 1 << 22;  // values in a body (each costs ~50 bytes parsed)
};

struct GenRequest {
  bool chat = false;
  std::string model;
  // completions: one or more prompts (text or token ids; each one choice); chat: messages
  struct Prompt {
    bool is_tokens = false;
    std::string text;
    std::vector<int32_t> tokens;
  };
  std::vector<Prompt> prompts;
  std::vector<ChatMessage> messages;
  bool echo = false;           // completions: the prompt comes back before the completion
  bool parse_special = false;  // control-token texts in prompts / message content are tokens
  bool add_generation_prompt = true;

  std::optional<int32_t> max_tokens;  // nullopt: the endpoint's default
  SamplerParams sampling;             // the server defaults with the request's fields applied
  bool seed_given = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;     // per-token log-probabilities
  int32_t top_logprobs = 0;  // alternatives per token
  bool return_progress = false;
  int32_t priority = 0;  // lower runs first (admission, prefill, preemption order)
  // The "sieve" extension object (policy + knobs), or a top-level "policy" name, as JSON text.
  std::optional<std::string> policy_json;
};

// Throws ApiError when the body is not JSON, too deeply nested, has more values than
// lim.max_json_values (413), or is not an object. `charge`, when given, is called with the
// estimated bytes the parsed value takes before it is built (it throws to refuse).
nlohmann::json parse_body(std::string_view body, const RequestLimits& lim,
                          const std::function<void(int64_t bytes)>& charge = {});

// `defaults`: the server's sampling defaults (fields the request leaves out).
GenRequest parse_gen_request(const nlohmann::json& body, bool chat, const RequestLimits& lim,
                             const SamplerParams& defaults);

// Field readers (also used by /tokenize and /detokenize). Absent or null -> nullopt.
std::optional<bool> opt_bool(const nlohmann::json& j, const char* name);
std::optional<int64_t> opt_int(const nlohmann::json& j, const char* name, int64_t lo, int64_t hi);
std::optional<double> opt_number(const nlohmann::json& j, const char* name, double lo, double hi,
                                 bool lo_open = false);
std::optional<std::string> opt_string(const nlohmann::json& j, const char* name);
// A token id array: every element an integer in [0, n_vocab).
std::vector<int32_t> token_array(const nlohmann::json& a, const char* name, int32_t n_vocab,
                                 size_t max_len);
// Chat messages (role + text content).
std::vector<ChatMessage> chat_messages(const nlohmann::json& a, const RequestLimits& lim);

}  // namespace sieve::server

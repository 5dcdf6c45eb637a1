// What runs a prompt: the engine in this process, or a server over HTTP. The matrix driver
// sees only this interface, so the local runner can move to the continuous-batching engine
// API later without touching tasks, scoring or reports.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"
#include "core/thread_pool.h"
#include "engine/engine_generate.h"
#include "eval/policies.h"
#include "model/model.h"

namespace sieve::eval {

struct CompletionRequest {
  std::span<const int32_t> tokens;  // the prompt, tokenized with the model's tokenizer
  std::string_view text;            // the same prompt as text (servers tokenize it themselves)
  int32_t max_new_tokens = 0;
  PolicyPtr policy;  // sparse attention policy (make_policy); nullptr: dense
  // Stop at the first newline that follows a letter or digit of the output (the answer line;
  // a lone ":" before it does not count), and leave the newline out. Off: generate
  // max_new_tokens or until end-of-generation, as RULER does.
  bool stop_at_newline = false;
};

// Where an output stops under stop_at_newline: the index of the first '\n' after a letter or
// digit, or npos.
size_t answer_line_end(std::string_view text);

struct Completion {
  std::string text;
  int64_t prompt_tokens = 0;
  int64_t prefill_tokens = 0;  // prompt tokens computed for this request
  int64_t reused_tokens = 0;   // prompt tokens taken from a cached prefix
  int64_t completion_tokens = 0;
  double prefill_ms = 0;  // time to the first generated token
  double decode_ms = 0;   // the rest
  // Fraction of the KV that attention read over the request (the engine's SparseStats);
  // < 0 when the backend does not say (a server without Sieve's "sieve" answer field).
  double selected_fraction = -1;
  // Mean keys selected per (layer, unit) selection (rtpurbo: the indexer's adaptive budget);
  // < 0 when not reported.
  double mean_selected = -1;
  std::string policy;  // the policy that ran as the backend reports it (auto resolved); "" unknown
};

class Runner_i {
 public:
  virtual ~Runner_i() = default;
  virtual Result<Completion> complete(const CompletionRequest& r) = 0;
  // "local" or the server URL, recorded with every sample.
  virtual std::string backend() const = 0;
  // How many complete() calls the runner serves at once, each from its own thread (an engine
  // that batches concurrent requests, as on the GPU); 1: one at a time, never concurrently.
  virtual int32_t max_parallel() const { return 1; }
};

struct LocalRunnerOptions {
  int32_t n_ctx = 0;         // KV capacity: the longest prompt + generation
  int32_t n_batch = 512;     // prefill chunk
  bool prefix_cache = true;  // keep the KV store between samples (the engine's prefix cache)
};

// Shared by in-process runners. A request they can take: a prompt, and room for it and its
// generation in a context of n_ctx tokens.
Status check_request(const CompletionRequest& r, int32_t n_ctx);
// The output so far gets token t: false once the answer line of
// a stop_at_newline request has ended (text accumulates the pieces).
bool answer_continues(const Model& model, const CompletionRequest& r, std::string& text, int32_t t);
// The completion of r from its generated tokens and the generation's statistics.
Completion completion_of(const Model& model, const CompletionRequest& r,
                         std::span<const int32_t> out, const GenerateStats& st);

// Greedy decoding in this process through the engine (SequenceEngine on the CPU runner), with
// the request's policy. With prefix_cache the engine (and its paged KV store) lives across
// samples of one policy, so a prompt that starts like the previous ones prefills only from the
// first uncached page; without it, at a change of policy, and for policies that do not allow
// it (policy_allows_prefix_reuse), each sample starts cold.
std::unique_ptr<Runner_i> make_local_runner(const Model& model, ThreadPool& pool,
                                            const LocalRunnerOptions& opt);

struct ServerRunnerOptions {
  std::string url;          // http://host:port (a path prefix is allowed: http://h:p/api)
  std::string model;        // "model" field of the request ("" = left out)
  double timeout_s = 3600;  // longest wait to connect, send, or for the next bytes
  bool stream = true;       // SSE, to time the first token; falls back to a JSON body
  bool send_policy = true;  // send the "sieve" policy object (off for servers that reject it)
};

// POST {url}/v1/completions (OpenAI-compatible: Sieve's server, llama.cpp, vLLM...). The
// prompt is sent as text with temperature 0 and, unless send_policy is off, the policy as
// "sieve": policy_request_json(...). Streaming separates prefill (time to the first event)
// from decode; a server that answers with plain JSON is accepted too. What ran is read from
// an optional "sieve" object of the answer (or of any stream event): {"policy",
// "selected_fraction"}; usage.prompt_tokens_details.cached_tokens counts reused tokens.
// Errors name the URL and the server's answer.
Result<std::unique_ptr<Runner_i>> make_server_runner(const ServerRunnerOptions& opt);

}  // namespace sieve::eval

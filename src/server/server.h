// `sieve serve`: the OpenAI-compatible HTTP front end of the engine (docs/server.md).
//   POST /v1/completions, /v1/chat/completions (SSE streaming or one JSON answer),
//        /tokenize, /detokenize
//   GET  /v1/models, /health, /metrics, /props
// Requests go to the engine's continuous-batching scheduler through Engine::submit; its
// events come back through a per-request queue that the connection's thread drains (engine
// callbacks never block). A client that disconnects is noticed by polling its socket and its
// request is cancelled, which frees its KV at the next engine step.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "sparse/policy_builder.h"

namespace sieve::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;   // "" -> no authentication
  std::string model_id;  // the id /v1/models lists ("" -> the file name without .gguf)
  EngineConfig engine;   // model_path, threads, n_ctx, max_running, ...
  HttpLimits http;
  int32_t max_tokens = 0;          // largest max_tokens a request may ask for (0 -> n_ctx)
  int32_t max_concurrent = 64;     // generation requests in flight (-> 429 beyond)
  SamplerParams sampling;          // defaults for fields a request leaves out
  bool fixed_seed = false;         // sampling.seed is the default seed (else random per request)
  PolicyPtr default_policy;        // --policy/--policy-file/--set (nullptr: the preset "auto")
  PolicyFiles policy_files;        // head plans and sketch bases a request may name
  double ping_interval_s = 15;     // SSE comment while a stream is otherwise silent (0: off)
  double progress_interval_s = 1;  // prompt_progress events when a request asks (return_progress)
  double shutdown_timeout_s = 30;  // SIGTERM: how long in-flight requests may finish
};

class Server {
 public:
  explicit Server(ServerConfig cfg);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the port and starts answering (503 "loading" until load() succeeds).
  Status start();
  // Loads the model and starts the engine (blocking); on failure /health reports it.
  Status load();
  // Stops taking new work (503), lets in-flight requests finish for up to `timeout`, then
  // cancels the rest (streams get a final error event). Returns the number cancelled.
  int drain(std::chrono::milliseconds timeout);
  // Closes every connection, joins the connection threads, stops the engine.
  void stop();
  int port() const { return http_ ? http_->port() : 0; }
  const ServerConfig& config() const { return cfg_; }

 private:
  enum class State { loading, ready, draining, failed };

  void handle(HttpExchange& ex);
  void route(HttpExchange& ex, std::string& endpoint);
  bool authorised(const HttpRequest& req) const;
  ApiError unauthorised(const HttpRequest& req) const;
  // The body as JSON, its parsed size charged to the in-flight budget first.
  nlohmann::json parse_request(HttpExchange& ex, const RequestLimits& lim);
  void charge(HttpExchange& ex, int64_t bytes) const;
  bool model_matches(const std::string& name) const;
  void require_ready() const;
  void reply_json(HttpExchange& ex, int status, const nlohmann::json& body);
  void reply_error(HttpExchange& ex, const ApiError& e);

  void handle_health(HttpExchange& ex);
  void handle_models(HttpExchange& ex);
  void handle_props(HttpExchange& ex);
  void handle_metrics(HttpExchange& ex);
  void handle_tokenize(HttpExchange& ex);
  void handle_detokenize(HttpExchange& ex);
  void handle_generate(HttpExchange& ex, bool chat);

  // server_generate.cpp
  std::vector<std::vector<int32_t>> prompt_tokens(const GenRequest& g) const;
  PolicyPtr request_policy(const GenRequest& g) const;
  void run_generation(HttpExchange& ex, const GenRequest& g,
                      std::vector<std::vector<int32_t>> prompts,
                      std::chrono::steady_clock::time_point t0);

  RequestLimits limits() const;

  ServerConfig cfg_;
  std::atomic<State> state_{State::loading};
  std::string load_error_;
  std::unique_ptr<Engine> engine_;  // written once by load(), before engine_ready_
  std::atomic<bool> engine_ready_{false};
  PolicyPtr default_policy_;
  std::string model_id_;
  int64_t max_token_bytes_ = 1;  // the longest token's text: prompts over n_ctx x this cannot fit
  std::unique_ptr<HttpServer> http_;
  Metrics metrics_;
  std::atomic<bool> shutting_down_{
      false};  // drain timed out: in-flight requests are being cancelled

  mutable std::mutex active_mu_;
  std::set<RequestId> active_;        // submitted, final event not yet seen
  std::atomic<int32_t> admitted_{0};  // generation requests holding a concurrency slot
};

}  // namespace sieve::server

#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include "core/log.h"
#include "model/chat_template.h"
#include "server/api_error.h"

namespace sieve::server {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kBuild = "sieve 0.1.0";

// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
}

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

// A piece as JSON: a string when it is valid UTF-8, else its bytes (as llama.cpp does).
json piece_json(const std::string& piece) {
  json s = piece;
  try {
    (void)s.dump();
    return s;
  } catch (const json::exception&) {
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(c);
    return bytes;
  }
}

}  // namespace

Server::Server(ServerConfig cfg) : cfg_(std::move(cfg)) {}

Server::~Server() {
  stop();
}

RequestLimits Server::limits() const {
  RequestLimits l;
  if (engine_) {
    l.n_ctx = engine_->config().n_ctx;
    l.n_vocab = engine_->model().hp.n_vocab;
  }
  l.max_tokens = cfg_.max_tokens > 0 ? cfg_.max_tokens : l.n_ctx;
  l.max_prompts = std::clamp(cfg_.max_concurrent, 1, 64);
  // a full batch of token-id prompts, plus room for the rest of a request
  l.max_json_values = static_cast<int64_t>(l.max_prompts) * (l.n_ctx + 16) + (1 << 16);
  return l;
}

void Server::charge(HttpExchange& ex, int64_t bytes) const {
  if (ex.charge(bytes)) return;
  if (bytes > cfg_.http.max_inflight_bytes) {
    throw ApiError{413,
                   fmt::format("the request needs about {} MiB, more than the server's in-flight "
                               "budget of {} MiB (--max-inflight-mib)",
                               bytes >> 20, cfg_.http.max_inflight_bytes >> 20),
                   "",
                   "request_too_large",
                   "",
                   json::object()};
  }
  throw ApiError{503, "the server is holding too many request bytes in flight; retry shortly",
                 "",  "server_busy",
                 "",  json::object()};
}

json Server::parse_request(HttpExchange& ex, const RequestLimits& lim) {
  return parse_body(ex.request().body, lim, [&](int64_t bytes) { charge(ex, bytes); });
}

bool Server::model_matches(const std::string& name) const {
  if (name.empty() || name == model_id_) return true;
  const std::filesystem::path p(cfg_.engine.model_path);
  return name == cfg_.engine.model_path || name == p.filename().string() ||
         name == p.stem().string();
}

Status Server::start() {
  default_policy_ = cfg_.default_policy;
  if (!default_policy_) {
    auto pol = make_policy("auto");
    if (!pol) return pol.error();
    default_policy_ = std::make_shared<const PolicyConfig>(*pol);
  }
  cfg_.engine.default_policy = default_policy_;
  http_ = std::make_unique<HttpServer>(
      cfg_.http, [this](HttpExchange& ex) { handle(ex); },
      [](int status, std::string_view msg) {
        // 503 from the HTTP layer: no connection slot or no room in the in-flight budget
        const char* code = status == 413 ? "request_too_large" : status == 503 ? "server_busy" : "";
        return error_body(ApiError{status, std::string(msg), "", code, "", json::object()});
      },
      // The key is checked on the head, before the body is read: an unauthenticated client
      // gets no buffer of up to --max-body-bytes.
      [this](const HttpRequest& head) -> std::optional<HttpServer::Refusal> {
        if (head.path == "/health" || authorised(head)) return std::nullopt;
        const ApiError e = unauthorised(head);
        metrics_.count_error(error_type_for(e.status));
        metrics_.count_http("other", e.status);
        return HttpServer::Refusal{e.status, error_body(e), {{"WWW-Authenticate", "Bearer"}}};
      });
  SIEVE_TRY(http_->listen(cfg_.host, cfg_.port));
  http_->start();
  return {};
}

Status Server::load() {
  const auto t0 = Clock::now();
  auto e = Engine::create(cfg_.engine);
  if (!e) {
    load_error_ = e.message();
    State s = State::loading;
    state_.compare_exchange_strong(s, State::failed);
    return e.error();
  }
  engine_ = std::move(e.value());
  model_id_ = cfg_.model_id;
  if (model_id_.empty()) model_id_ = std::filesystem::path(cfg_.engine.model_path).stem().string();
  {
    const Tokenizer& tok = *engine_->model().tokenizer;
    for (int32_t id = 0; id < tok.n_vocab(); ++id)
      max_token_bytes_ =
          std::max<int64_t>(max_token_bytes_, static_cast<int64_t>(tok.token_text(id).size()));
  }
  engine_ready_ = true;
  const KvStats kv = engine_->kv_stats();
  // pages are per (layer) stream: the pool holds n_pages_total / n_streams pages of tokens
  const int64_t kv_tokens = static_cast<int64_t>(kv.n_pages_total) * engine_->config().page_size /
                            std::max(1, kv.n_stream_full + kv.n_stream_window);
  log_info(
      "server: {} loaded in {:.1f} s; context {} tokens, KV pool {} pages ({} tokens), {} "
      "sequences at once, "
      "default policy: {}",
      model_id_, std::chrono::duration<double>(Clock::now() - t0).count(), engine_->config().n_ctx,
      kv.n_pages_total, kv_tokens, engine_->config().max_running, default_policy_->describe());
  State s = State::loading;
  state_.compare_exchange_strong(s, State::ready);  // stays draining if a signal came first
  return {};
}

int Server::drain(std::chrono::milliseconds timeout) {
  State s = state_.load();
  while (s != State::draining && !state_.compare_exchange_weak(s, State::draining)) {
  }
  const auto deadline = Clock::now() + timeout;
  while (admitted_.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int cancelled = 0;
  if (admitted_.load() > 0 && engine_ready_.load()) {
    shutting_down_ = true;
    std::vector<RequestId> ids;
    {
      std::lock_guard<std::mutex> lock(active_mu_);
      ids.assign(active_.begin(), active_.end());
    }
    for (RequestId id : ids) engine_->cancel(id);
    cancelled = static_cast<int>(ids.size());
    const auto d2 = Clock::now() + std::chrono::seconds(10);
    while (admitted_.load() > 0 && Clock::now() < d2)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cancelled;
}

void Server::stop() {
  if (http_) http_->stop();
  engine_ready_ = false;
  engine_.reset();
}

ApiError Server::unauthorised(const HttpRequest& req) const {
  const bool sent = !req.header("authorization").empty() || !req.header("x-api-key").empty();
  return ApiError{
      401,
      sent ? "invalid API key" : "missing API key: send the header Authorization: Bearer <key>",
      "",
      "invalid_api_key",
      "",
      json::object()};
}

bool Server::authorised(const HttpRequest& req) const {
  if (cfg_.api_key.empty()) return true;
  std::string key = req.header("x-api-key");
  const std::string auth = req.header("authorization");
  if (auth.size() > 7 &&
      (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0)) {
    key = auth.substr(7);
    while (!key.empty() && key.front() == ' ') key.erase(0, 1);
  }
  return !key.empty() && constant_time_equal(key, cfg_.api_key);
}

void Server::require_ready() const {
  switch (state_.load()) {
    case State::ready:
      return;
    case State::loading:
      throw ApiError{503,           "the model is loading; retry shortly", "", "model_loading", "",
                     json::object()};
    case State::draining:
      throw ApiError{503,           "the server is shutting down", "", "server_shutting_down", "",
                     json::object()};
    case State::failed:
      throw ApiError{503, "the model failed to load: " + load_error_,
                     "",  "model_load_failed",
                     "",  json::object()};
  }
}

void Server::reply_json(HttpExchange& ex, int status, const json& body) {
  ex.respond(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
}

void Server::reply_error(HttpExchange& ex, const ApiError& e) {
  HttpHeaders extra;
  if (e.status == 401) extra.emplace_back("WWW-Authenticate", "Bearer");
  if (e.status == 429 || e.status == 503) extra.emplace_back("Retry-After", "1");
  if (e.status == 503 && state_.load() == State::draining) ex.close_after();
  metrics_.count_error(e.type.empty() ? error_type_for(e.status) : e.type);
  ex.respond(e.status, "application/json", error_body(e), extra);
}

void Server::handle(HttpExchange& ex) {
  std::string endpoint = "other";
  try {
    route(ex, endpoint);
  } catch (const ApiError& e) {
    if (!ex.responded()) reply_error(ex, e);
  } catch (const std::bad_alloc&) {
    if (!ex.responded())
      reply_error(ex, ApiError{503, "out of memory for this request", "", "", "", json::object()});
  }
  metrics_.count_http(endpoint, ex.status());
}

void Server::route(HttpExchange& ex, std::string& endpoint) {
  const HttpRequest& req = ex.request();
  const std::string& p = req.path;
  auto method = [&](const char* want) {
    const bool ok = req.method == want || (std::string_view(want) == "GET" && req.method == "HEAD");
    if (!ok) {
      throw ApiError{405, fmt::format("{} {} is not allowed; use {}", req.method, p, want),
                     "",  "method_not_allowed",
                     "",  json::object()};
    }
  };
  // Public: /health only. Everything else, known or not, needs the key (deny by default, on
  // the normalised path the router uses).
  if (p == "/health") {
    endpoint = "health";
    method("GET");
    return handle_health(ex);
  }
  if (!authorised(req)) throw unauthorised(req);  // the HTTP layer checked already
  if (p == "/v1/models" || p == "/models") {
    endpoint = "models";
    method("GET");
    return handle_models(ex);
  }
  if (p == "/v1/completions" || p == "/completions") {
    endpoint = "completions";
    method("POST");
    return handle_generate(ex, false);
  }
  if (p == "/v1/chat/completions" || p == "/chat/completions") {
    endpoint = "chat_completions";
    method("POST");
    return handle_generate(ex, true);
  }
  if (p == "/tokenize") {
    endpoint = "tokenize";
    method("POST");
    return handle_tokenize(ex);
  }
  if (p == "/detokenize") {
    endpoint = "detokenize";
    method("POST");
    return handle_detokenize(ex);
  }
  if (p == "/metrics") {
    endpoint = "metrics";
    method("GET");
    return handle_metrics(ex);
  }
  if (p == "/props") {
    endpoint = "props";
    method("GET");
    return handle_props(ex);
  }
  throw ApiError{404, fmt::format("no such endpoint: {} {}", req.method, p),
                 "",  "not_found",
                 "",  json::object()};
}

void Server::handle_health(HttpExchange& ex) {
  switch (state_.load()) {
    case State::ready:
      return reply_json(ex, 200, {{"status", "ok"}});
    case State::loading: {
      json j = error_json(ApiError{503, "Loading model", "", "model_loading", "", json::object()});
      j["status"] = "loading";
      return reply_json(ex, 503, j);
    }
    case State::draining: {
      json j = error_json(ApiError{503, "the server is shutting down", "", "server_shutting_down",
                                   "", json::object()});
      j["status"] = "draining";
      ex.close_after();
      return reply_json(ex, 503, j);
    }
    case State::failed: {
      json j = error_json(ApiError{503, "the model failed to load: " + load_error_, "",
                                   "model_load_failed", "", json::object()});
      j["status"] = "error";
      return reply_json(ex, 503, j);
    }
  }
}

void Server::handle_models(HttpExchange& ex) {
  require_ready();
  const ModelHParams& hp = engine_->model().hp;
  const int32_t n_ctx = engine_->config().n_ctx;
  json m = {{"id", model_id_},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "sieve"},
            {"max_model_len", n_ctx},
            {"context_length", n_ctx},
            {"meta",
             {{"arch", hp.arch},
              {"n_ctx", n_ctx},
              {"n_ctx_train", hp.n_ctx_train},
              {"n_vocab", hp.n_vocab},
              {"n_embd", hp.n_embd},
              {"n_layer", hp.n_layer},
              {"default_policy", default_policy_->describe()}}}};
  reply_json(ex, 200, {{"object", "list"}, {"data", json::array({m})}});
}

void Server::handle_props(HttpExchange& ex) {
  require_ready();
  const EngineConfig& ec = engine_->config();
  const RequestLimits lim = limits();
  std::string tmpl_family = "none";
  if (auto info = detect_chat_template(engine_->model().tokenizer->chat_template()))
    tmpl_family = info->kind == ChatTemplateKind::gemma ? "gemma" : "chatml";
  reply_json(ex, 200,
             {{"model", model_id_},
              {"model_path", ec.model_path},
              {"build", kBuild},
              {"n_ctx", ec.n_ctx},
              {"n_ctx_train", engine_->model().hp.n_ctx_train},
              {"max_tokens", lim.max_tokens},
              {"max_concurrent_requests", cfg_.max_concurrent},
              {"max_running", ec.max_running},
              {"max_batch_tokens", ec.max_batch_tokens},
              {"max_step_ms", ec.max_step_ms < 0 ? json("auto") : json(ec.max_step_ms)},
              {"max_body_bytes", cfg_.http.max_body_bytes},
              {"chat_template", tmpl_family},
              {"default_policy", default_policy_->describe()},
              {"auth", !cfg_.api_key.empty()}});
}

void Server::handle_metrics(HttpExchange& ex) {
  EngineSnapshot snap;
  if (engine_ready_.load()) {
    snap.ready = state_.load() == State::ready;
    snap.sched = engine_->stats();
    snap.kv = engine_->kv_stats();
    snap.page_size = engine_->config().page_size;
    snap.backend = std::string(engine_->backend());
    snap.n_ctx = engine_->config().n_ctx;
  }
  ex.respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(snap));
}

void Server::handle_tokenize(HttpExchange& ex) {
  require_ready();
  const RequestLimits lim = limits();
  const json body = parse_request(ex, lim);
  const Tokenizer& tok = *engine_->model().tokenizer;
  const bool add_special =
      opt_bool(body, "add_special").value_or(opt_bool(body, "add_special_tokens").value_or(true));
  const bool parse_special = opt_bool(body, "parse_special").value_or(false);
  const bool with_pieces = opt_bool(body, "with_pieces").value_or(false);
  std::vector<int32_t> ids;
  if (body.contains("messages") && !body["messages"].is_null()) {
    const auto msgs = chat_messages(body["messages"], lim);
    auto chat = encode_chat(tok, msgs, opt_bool(body, "add_generation_prompt").value_or(true),
                            parse_special);
    if (!chat) throw ApiError::bad("messages", chat.message(), "invalid_messages");
    ids = std::move(*chat);
  } else {
    std::optional<std::string> text = opt_string(body, "content");
    if (!text) text = opt_string(body, "prompt");
    if (!text) throw ApiError::bad("content", "content (a string) or messages is required");
    ids = tok.encode(*text, add_special, parse_special);
  }
  json tokens = json::array();
  for (int32_t id : ids) {
    if (with_pieces)
      tokens.push_back({{"id", id}, {"piece", piece_json(tok.token_to_piece(id, true))}});
    else
      tokens.push_back(id);
  }
  reply_json(ex, 200, {{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", lim.n_ctx}});
}

void Server::handle_detokenize(HttpExchange& ex) {
  require_ready();
  const RequestLimits lim = limits();
  const json body = parse_request(ex, lim);
  if (!body.contains("tokens") || body["tokens"].is_null())
    throw ApiError::bad("tokens", "tokens is required");
  const std::vector<int32_t> ids =
      token_array(body["tokens"], "tokens", lim.n_vocab, size_t{1} << 24);
  const std::string text = engine_->model().tokenizer->decode(ids);
  reply_json(ex, 200, {{"content", text}, {"prompt", text}});
}

void Server::handle_generate(HttpExchange& ex, bool chat) {
  const auto t0 = Clock::now();
  require_ready();
  const RequestLimits lim = limits();
  const json body = parse_request(ex, lim);
  GenRequest g = parse_gen_request(body, chat, lim, cfg_.sampling);
  if (!model_matches(g.model)) {
    const std::string shown = g.model.size() > 64 ? g.model.substr(0, 64) + "..." : g.model;
    throw ApiError{
        404,
        fmt::format("the model '{}' does not exist; this server serves '{}'", shown, model_id_),
        "model",
        "model_not_found",
        "",
        json::object()};
  }
  if (!g.seed_given && !cfg_.fixed_seed) g.sampling.seed = random_seed();
  // A text that cannot fit even at the longest token per position is refused before it is
  // tokenized (a 10 MB prompt on a small context costs nothing).
  const int64_t max_text = static_cast<int64_t>(lim.n_ctx) * max_token_bytes_;
  auto too_long_text = [&](int64_t bytes) {
    throw ApiError{400,
                   fmt::format("the request ({} bytes of prompt text) exceeds the available "
                               "context size ({} tokens)",
                               bytes, lim.n_ctx),
                   chat ? "messages" : "prompt",
                   "context_length_exceeded",
                   "",
                   {{"n_prompt_bytes", bytes}, {"n_ctx", lim.n_ctx}}};
  };
  int64_t chat_bytes = 0;
  for (const ChatMessage& m : g.messages) chat_bytes += static_cast<int64_t>(m.content.size());
  if (chat_bytes > max_text) too_long_text(chat_bytes);
  for (const GenRequest::Prompt& p : g.prompts)
    if (!p.is_tokens && static_cast<int64_t>(p.text.size()) > max_text)
      too_long_text(static_cast<int64_t>(p.text.size()));
  std::vector<std::vector<int32_t>> prompts = prompt_tokens(g);
  int64_t n_tokens_total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int32_t n_prompt = static_cast<int32_t>(prompts[i].size());
    n_tokens_total += n_prompt;
    if (n_prompt >= lim.n_ctx) {
      json extra = {{"n_prompt_tokens", n_prompt}, {"n_ctx", lim.n_ctx}};
      if (prompts.size() > 1) extra["prompt_index"] = i;
      throw ApiError{
          400,
          fmt::format(
              "the request ({} prompt tokens) exceeds the available context size ({} tokens); at "
              "least one token must be left for the completion",
              n_prompt, lim.n_ctx),
          chat ? "messages" : "prompt",
          "context_length_exceeded",
          "",
          extra};
    }
  }
  // The token arrays in flight (ours, the engine's copy, its KV-side copy) and, for echo with
  // logprobs, the per-token entries of the answer.
  const int64_t per_token =
      12 + (g.echo && g.logprobs ? 160 + 64 * static_cast<int64_t>(g.top_logprobs) : 0);
  charge(ex, n_tokens_total * per_token);
  const int32_t n_choices = static_cast<int32_t>(prompts.size());
  if (admitted_.fetch_add(n_choices) + n_choices > cfg_.max_concurrent) {
    admitted_ -= n_choices;
    throw ApiError{429,
                   fmt::format("{} requests are already in flight (the limit); retry shortly",
                               cfg_.max_concurrent),
                   "",
                   "too_many_requests",
                   "",
                   json::object()};
  }
  struct Slot {
    std::atomic<int32_t>& n;
    int32_t k;
    ~Slot() { n -= k; }
  } slot{admitted_, n_choices};
  run_generation(ex, g, std::move(prompts), t0);
}

}  // namespace sieve::server

// /v1/completions and /v1/chat/completions: tokenize, submit to the engine, and turn its
// events into OpenAI chunks (SSE) or one response object.
#include <condition_variable>
#include <deque>
#include <random>

#include "core/log.h"
#include "model/chat_template.h"
#include "server/server.h"
#include "sparse/policy_builder.h"

namespace sieve::server {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kFingerprint = "sieve-0.1.0";

// Events from the engine thread to the connection's thread. The callback only appends under
// a short lock (it runs on the engine thread and must not block); shared ownership keeps the
// queue alive when a cancelled request's last event arrives after the handler has gone.
struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RequestEvent> events;
};

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   static_cast<uint64_t>(Clock::now().time_since_epoch().count())};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

// OpenAI reports -9999 for tokens of probability 0 (JSON has no -inf).
double finite_logprob(float lp) {
  return std::isfinite(lp) ? std::max<double>(lp, -9999.0) : -9999.0;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(c);
  return b;
}

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "abort";
    default:
      return "error";
  }
}

// Per-token log-probabilities in the two OpenAI shapes.
class Logprobs {
 public:
  Logprobs(const Tokenizer& tok, bool chat) : tok_(tok), chat_(chat) {}

  // The entry of one token (chat: one element of logprobs.content).
  json chat_entry(const RequestEvent& ev) const {
    const std::string piece = tok_.token_to_piece(ev.token, true);
    json top = json::array();
    for (const TokenLogprob& t : ev.top) {
      const std::string p = tok_.token_to_piece(t.token, true);
      top.push_back({{"token", p}, {"logprob", finite_logprob(t.logprob)}, {"bytes", bytes_of(p)}});
    }
    return {{"token", piece},
            {"logprob", finite_logprob(ev.logprob)},
            {"bytes", bytes_of(piece)},
            {"top_logprobs", top}};
  }

  void add(const RequestEvent& ev) {
    if (chat_) {
      content_.push_back(chat_entry(ev));
      return;
    }
    const std::string piece = tok_.token_to_piece(ev.token, true);
    tokens_.push_back(piece);
    token_logprobs_.push_back(finite_logprob(ev.logprob));
    json top = json::object();
    for (const TokenLogprob& t : ev.top)
      top[tok_.token_to_piece(t.token, true)] = finite_logprob(t.logprob);
    top_.push_back(top);
    offsets_.push_back(offset_);
    offset_ += static_cast<int64_t>(piece.size());
  }

  // The prompt's tokens (echo): the first has no log-probability (null, as OpenAI), token
  // k + 1 has lps[k]; entries the engine did not deliver (cancelled) are null too.
  void add_prompt(std::span<const int32_t> prompt, const std::vector<PromptLogprob>& lps) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      const std::string piece = tok_.token_to_piece(prompt[i], true);
      tokens_.push_back(piece);
      const PromptLogprob* lp = i > 0 && i - 1 < lps.size() ? &lps[i - 1] : nullptr;
      token_logprobs_.push_back(lp ? json(finite_logprob(lp->logprob)) : json(nullptr));
      if (lp) {
        json top = json::object();
        for (const TokenLogprob& t : lp->top)
          top[tok_.token_to_piece(t.token, true)] = finite_logprob(t.logprob);
        top_.push_back(top);
      } else {
        top_.push_back(nullptr);
      }
      offsets_.push_back(offset_);
      offset_ += static_cast<int64_t>(piece.size());
    }
  }
  // The echoed prompt as a streamed chunk carries it.
  json prompt_value(std::span<const int32_t> prompt, const std::vector<PromptLogprob>& lps) {
    Logprobs one(tok_, chat_);
    one.add_prompt(prompt, lps);
    offset_ = one.offset_;
    return one.value();
  }

  json value() const {
    if (chat_) return {{"content", content_}, {"refusal", nullptr}};
    return {{"tokens", tokens_},
            {"token_logprobs", token_logprobs_},
            {"top_logprobs", top_},
            {"text_offset", offsets_}};
  }

  // One token's logprobs as a streamed chunk carries them.
  json single(const RequestEvent& ev) {
    Logprobs one(tok_, chat_);
    one.offset_ = offset_;
    one.add(ev);
    offset_ = one.offset_;
    return one.value();
  }

 private:
  const Tokenizer& tok_;
  bool chat_;
  json content_ = json::array();
  json tokens_ = json::array(), token_logprobs_ = json::array(), top_ = json::array(),
       offsets_ = json::array();
  int64_t offset_ = 0;
};

}  // namespace

std::vector<std::vector<int32_t>> Server::prompt_tokens(const GenRequest& g) const {
  const Tokenizer& tok = *engine_->model().tokenizer;
  std::vector<std::vector<int32_t>> out;
  if (g.chat) {
    // The template's markers are special tokens; the messages' text is plain text (no forged
    // turns) unless the request opts in with parse_special. BOS only when the model asks.
    auto ids = encode_chat(tok, g.messages, g.add_generation_prompt, g.parse_special);
    if (!ids) throw ApiError::bad("messages", ids.message(), "invalid_messages");
    out.push_back(std::move(*ids));
    return out;
  }
  for (const GenRequest::Prompt& p : g.prompts) {
    // Raw text: control-token text in a prompt stays text unless parse_special.
    out.push_back(p.is_tokens ? p.tokens : tok.encode(p.text, true, g.parse_special));
  }
  return out;
}

PolicyPtr Server::request_policy(const GenRequest& g) const {
  if (!g.policy_json) return nullptr;  // the engine's default (the server's --policy)
  // A request naming a preset starts from it; knobs without one adjust the server's default.
  PolicySources src;
  src.base = default_policy_.get();
  src.request_json = *g.policy_json;
  src.files = &cfg_.policy_files;
  auto p = build_policy(src);
  if (!p) throw ApiError::bad("sieve", "sieve: " + p.message(), "invalid_policy");
  return std::make_shared<const PolicyConfig>(std::move(p.value()));
}

namespace {

// One choice of a request: one engine request (a prompt of a batch, or the chat).
struct Choice {
  explicit Choice(const Tokenizer& tok, bool chat) : lp(tok, chat) {}
  RequestId id = 0;
  std::vector<int32_t> prompt;
  std::string echo_text;  // the prompt as text (echo)
  std::string text;       // generated (non-stream)
  Logprobs lp;
  RequestEvent final_ev;
  bool done = false;
  bool started = false;  // its first event has come (the echo is sent with it)
  int64_t n_tokens = 0;
  Clock::time_point t_first{}, t_prev{};
};

}  // namespace

void Server::run_generation(HttpExchange& ex, const GenRequest& g,
                            std::vector<std::vector<int32_t>> prompts, Clock::time_point t0) {
  const Tokenizer& tok = *engine_->model().tokenizer;
  const int32_t n_ctx = engine_->config().n_ctx;
  const PolicyPtr policy = request_policy(g);
  const PolicyConfig& effective = *(policy ? policy : default_policy_);
  const std::string policy_desc = effective.describe();
  int64_t n_prompt_total = 0;
  for (const auto& p : prompts) {
    if (Status st = engine_->check_policy(effective, static_cast<int64_t>(p.size())); !st)
      throw ApiError::bad("sieve", "sieve: " + st.message(), "invalid_policy");
    n_prompt_total += static_cast<int64_t>(p.size());
  }

  auto q = std::make_shared<EventQueue>();
  std::vector<Choice> choices;
  choices.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Choice& c = choices.emplace_back(tok, g.chat);
    if (g.echo) {
      c.echo_text = i < g.prompts.size() && !g.prompts[i].is_tokens ? g.prompts[i].text
                                                                    : tok.decode(prompts[i]);
    }
    const int32_t n_prompt = static_cast<int32_t>(prompts[i].size());
    RequestParams rp;
    rp.prompt = prompts[i];
    // OpenAI's defaults: 16 tokens for completions, the rest of the context for chat.
    rp.max_tokens =
        g.max_tokens.value_or(g.chat ? limits().max_tokens : std::min(16, limits().max_tokens));
    rp.max_tokens = std::min(rp.max_tokens, n_ctx - n_prompt);
    rp.sampling = g.sampling;
    rp.stop_at_eog = !g.ignore_eos;
    rp.stop = g.stop;
    rp.logprobs = g.logprobs;
    rp.n_logprobs = g.top_logprobs;
    rp.prompt_logprobs = g.echo && g.logprobs;
    rp.policy = policy;
    rp.priority = g.priority;
    c.prompt = std::move(prompts[i]);
    metrics_.observe_prompt_tokens(n_prompt);
    metrics_.in_flight++;
    c.id = engine_->submit(std::move(rp), [q](const RequestEvent& ev) {
      {
        std::lock_guard<std::mutex> lock(q->mu);
        q->events.push_back(ev);
      }
      q->cv.notify_one();
    });
    std::lock_guard<std::mutex> lock(active_mu_);
    active_.insert(c.id);
  }
  auto choice_of = [&](RequestId id) -> Choice* {
    for (Choice& c : choices)
      if (c.id == id) return &c;
    return nullptr;
  };

  const std::string rid = random_id(g.chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  auto chunk = [&](json ch) {
    json c = {{"id", rid},
              {"object", g.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model_id_},
              {"system_fingerprint", kFingerprint},
              {"choices", ch.is_null() ? json::array() : json::array({ch})}};
    if (g.include_usage) c["usage"] = nullptr;
    return c;
  };
  auto choice = [&](size_t index, const std::string& text, json logprobs, json finish) {
    if (g.chat) {
      json delta = json::object();
      if (!text.empty()) delta["content"] = text;
      return json{
          {"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}};
    }
    return json{
        {"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}};
  };

  bool client_gone = false;
  auto write = [&](const std::string& s) {
    if (client_gone) return false;
    if (!ex.write(s)) client_gone = true;
    return !client_gone;
  };
  auto last_write = Clock::now();
  if (g.stream) {
    if (!ex.begin_stream(200, "text/event-stream",
                         {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}})) {
      client_gone = true;
    } else if (g.chat) {
      write(sse(chunk(json{{"index", 0},
                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                           {"logprobs", nullptr},
                           {"finish_reason", nullptr}})));
    }
  }

  size_t n_done = 0;
  bool cancel_sent = false;
  int64_t n_tokens_all = 0;
  Clock::time_point t_last_check = Clock::now(), t_progress = Clock::now();
  Clock::time_point abandon_at = Clock::time_point::max();
  const auto ping = std::chrono::duration<double>(cfg_.ping_interval_s);
  const auto progress_every = std::chrono::duration<double>(cfg_.progress_interval_s);

  std::vector<RequestEvent> batch;
  while (n_done < choices.size()) {
    {
      std::unique_lock<std::mutex> lock(q->mu);
      q->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !q->events.empty(); });
      batch.swap(q->events);
    }
    const auto now = Clock::now();
    for (RequestEvent& ev : batch) {
      Choice* cp = choice_of(ev.id);
      if (!cp || cp->done) continue;
      Choice& c = *cp;
      const size_t index = static_cast<size_t>(&c - choices.data());
      if (!c.started) {
        // The prompt comes first: as text, and with its log-probabilities when asked.
        c.started = true;
        if (g.echo) {
          if (g.stream) {
            write(sse(chunk(
                choice(index, c.echo_text,
                       g.logprobs ? c.lp.prompt_value(c.prompt, ev.prompt_logprobs) : json(nullptr),
                       nullptr))));
            last_write = now;
          } else {
            c.text = c.echo_text;
            if (g.logprobs) c.lp.add_prompt(c.prompt, ev.prompt_logprobs);
          }
        }
      }
      if (ev.token >= 0) {
        c.n_tokens++;
        n_tokens_all++;
        if (c.n_tokens == 1) {
          c.t_first = now;
          metrics_.observe_ttft(std::chrono::duration<double>(now - t0).count());
        } else {
          metrics_.observe_itl(std::chrono::duration<double>(now - c.t_prev).count());
        }
        c.t_prev = now;
        if (g.stream) {
          if (!ev.text.empty() || g.logprobs) {
            write(sse(chunk(
                choice(index, ev.text, g.logprobs ? c.lp.single(ev) : json(nullptr), nullptr))));
            last_write = now;
          }
        } else {
          c.text += ev.text;
          if (g.logprobs) c.lp.add(ev);
        }
      }
      if (ev.finished) {
        c.final_ev = std::move(ev);
        c.done = true;
        n_done++;
        std::lock_guard<std::mutex> lock(active_mu_);
        active_.erase(c.id);
      }
    }
    batch.clear();
    if (n_done == choices.size()) break;
    if (cancel_sent) {
      if (Clock::now() > abandon_at) break;  // the engine did not confirm in time: leave it
      continue;
    }
    // The client went away (a failed write, or its socket closed): cancel, which frees the
    // requests' KV at the engine's next step, and wait for the engine's final events.
    if (!client_gone && now - t_last_check >= std::chrono::milliseconds(100)) {
      t_last_check = now;
      if (ex.peer_closed()) client_gone = true;
    }
    if (client_gone) {
      for (const Choice& c : choices)
        if (!c.done) engine_->cancel(c.id);
      cancel_sent = true;
      metrics_.disconnects++;
      abandon_at = Clock::now() + std::chrono::seconds(30);
      log_info("server: {} client disconnected; request cancelled", rid);
      continue;
    }
    if (g.stream && n_tokens_all == 0 && g.return_progress && now - t_progress >= progress_every) {
      t_progress = now;
      // The engine reports no per-request prefill position: when this is the only request
      // in flight, the KV it holds is its progress; otherwise only the elapsed time is known.
      json prog = {{"total", n_prompt_total},
                   {"time_ms", std::chrono::duration<double, std::milli>(now - t0).count()}};
      if (metrics_.in_flight.load() == 1) {
        const KvStats kv = engine_->kv_stats();
        const int64_t held = static_cast<int64_t>(kv.n_pages_used) * engine_->config().page_size /
                             std::max(1, kv.n_stream_full + kv.n_stream_window);
        prog["processed"] = std::min<int64_t>(held, n_prompt_total);
        prog["estimated"] = true;
      }
      json c = chunk(nullptr);
      c["prompt_progress"] = prog;
      write(sse(c));
      last_write = now;
    }
    if (g.stream && ping.count() > 0 && now - last_write >= ping) {
      write(": ping\n\n");
      last_write = now;
    }
  }

  const auto t_end = Clock::now();
  const double e2e_s = std::chrono::duration<double>(t_end - t0).count();
  const Choice* failed = nullptr;
  for (Choice& c : choices) {
    if (!c.done) {  // abandoned: the engine never confirmed the cancel
      std::lock_guard<std::mutex> lock(active_mu_);
      active_.erase(c.id);
    }
    metrics_.in_flight--;
    const FinishReason reason = c.done ? c.final_ev.reason : FinishReason::cancelled;
    const RequestEvent& f = c.final_ev;
    metrics_.count_finished(finish_name(reason), f.prompt_tokens, f.cached_tokens,
                            f.completion_tokens, f.sparse);
    if (reason == FinishReason::stop || reason == FinishReason::length) {
      metrics_.observe_e2e(e2e_s);
      metrics_.observe_queue(f.queue_ms / 1000.0);
    } else if (!failed) {
      failed = &c;
    }
    log_info(
        "server: {} {} prompt={} cached={} completion={} finish={} ttft_ms={:.0f} e2e_ms={:.0f}",
        rid, g.stream ? "stream" : "json", f.prompt_tokens, f.cached_tokens, f.completion_tokens,
        finish_name(reason),
        c.n_tokens ? std::chrono::duration<double, std::milli>(c.t_first - t0).count() : 0.0,
        e2e_s * 1000);
  }
  if (client_gone) return;

  if (failed) {
    const FinishReason reason = failed->done ? failed->final_ev.reason : FinishReason::cancelled;
    const ApiError err =
        reason == FinishReason::cancelled
            ? ApiError{503, "the server is shutting down; the request was aborted",
                       "",  "server_shutting_down",
                       "",  json::object()}
        : !failed->final_ev.error_code.empty()
            // the request cannot run as given: the client's to change
            ? ApiError{400, failed->final_ev.error, "", failed->final_ev.error_code,
                       "",  json::object()}
            : ApiError{500, "generation failed: " + failed->final_ev.error,
                       "",  "generation_failed",
                       "",  json::object()};
    metrics_.count_error(error_type_for(err.status));
    if (!g.stream) {
      if (err.status == 503) ex.close_after();
      ex.respond(err.status, "application/json", error_body(err), {});
      return;
    }
    write(sse(error_json(err)));
    write("data: [DONE]\n\n");
    ex.end();
    return;
  }

  // usage adds up the choices; timings and sieve describe the first choice.
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  for (const Choice& c : choices) {
    prompt_tokens += c.final_ev.prompt_tokens;
    completion_tokens += c.final_ev.completion_tokens;
    cached_tokens += c.final_ev.cached_tokens;
  }
  const json usage = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  const Choice& c0 = choices.front();
  const RequestEvent& f0 = c0.final_ev;
  const double prompt_ms =
      c0.n_tokens ? std::chrono::duration<double, std::milli>(c0.t_first - t0).count() : 0;
  const double predicted_ms =
      c0.n_tokens > 1 ? std::chrono::duration<double, std::milli>(c0.t_prev - c0.t_first).count()
                      : 0;
  const json timings = {
      {"prompt_n", f0.prompt_tokens - f0.cached_tokens},
      {"cache_n", f0.cached_tokens},
      {"prompt_ms", prompt_ms},
      {"prompt_per_second",
       prompt_ms > 0 ? (f0.prompt_tokens - f0.cached_tokens) * 1000.0 / prompt_ms : 0},
      {"predicted_n", f0.completion_tokens},
      {"predicted_ms", predicted_ms},
      {"predicted_per_second", predicted_ms > 0 ? (c0.n_tokens - 1) * 1000.0 / predicted_ms : 0}};
  const json sieve_stats = {{"policy", f0.policy.empty() ? policy_desc : f0.policy},
                            {"selected_fraction", f0.sparse.selected_fraction()},
                            {"mean_selected_tokens", f0.sparse.mean_selected()},
                            {"selection_cache_hit_rate", f0.sparse.hit_rate()},
                            {"tokens_evicted", f0.sparse.tokens_evicted},
                            {"kv_bytes_held", f0.sparse.kv_bytes_held},
                            {"n_preempted", f0.n_preempted}};
  if (g.stream) {
    for (size_t i = 0; i < choices.size(); ++i) {
      const RequestEvent& f = choices[i].final_ev;
      if (!f.text.empty()) write(sse(chunk(choice(i, f.text, nullptr, nullptr))));
      json last = chunk(choice(i, "", nullptr, finish_name(f.reason)));
      if (i + 1 == choices.size()) {
        last["sieve"] = sieve_stats;
        last["timings"] = timings;
      }
      write(sse(last));
    }
    if (g.include_usage) {
      json u = chunk(nullptr);
      u["usage"] = usage;
      write(sse(u));
    }
    write("data: [DONE]\n\n");
    ex.end();
    return;
  }
  json out_choices = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Choice& c = choices[i];
    c.text += c.final_ev.text;
    const char* finish = finish_name(c.final_ev.reason);
    if (g.chat) {
      out_choices.push_back({{"index", i},
                             {"message", {{"role", "assistant"}, {"content", c.text}}},
                             {"logprobs", g.logprobs ? c.lp.value() : json(nullptr)},
                             {"finish_reason", finish}});
    } else {
      out_choices.push_back({{"index", i},
                             {"text", c.text},
                             {"logprobs", g.logprobs ? c.lp.value() : json(nullptr)},
                             {"finish_reason", finish}});
    }
  }
  reply_json(ex, 200,
             {{"id", rid},
              {"object", g.chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model_id_},
              {"system_fingerprint", kFingerprint},
              {"choices", out_choices},
              {"usage", usage},
              {"timings", timings},
              {"sieve", sieve_stats}});
}

}  // namespace sieve::server

// The HTTP runner: the same samples sent to an OpenAI-compatible /v1/completions endpoint.
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "eval/http_client.h"
#include "eval/runner.h"

namespace sieve::eval {
namespace {

using json = nlohmann::json;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The "sieve" object of an answer or stream event: what ran and what it read.
void read_sieve_stats(const json& j, Completion& c) {
  if (!j.contains("sieve") || !j["sieve"].is_object()) return;
  const json& s = j["sieve"];
  if (s.contains("policy") && s["policy"].is_string()) c.policy = s["policy"].get<std::string>();
  if (s.contains("selected_fraction") && s["selected_fraction"].is_number())
    c.selected_fraction = s["selected_fraction"].get<double>();
}

// The text of choices[0] of a completion object, or of a chat-style delta when a server
// streams those.
std::string choice_text(const json& j) {
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return {};
  const json& c = j["choices"][0];
  if (c.contains("text") && c["text"].is_string()) return c["text"].get<std::string>();
  if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
      c["delta"]["content"].is_string()) {
    return c["delta"]["content"].get<std::string>();
  }
  return {};
}

class ServerRunner final : public Runner_i {
 public:
  ServerRunner(ServerRunnerOptions opt, HttpUrl url) : opt_(std::move(opt)), url_(std::move(url)) {}

  std::string backend() const override { return opt_.url; }

  Result<Completion> complete(const CompletionRequest& r) override {
    json body = {{"prompt", std::string(r.text)},
                 {"max_tokens", r.max_new_tokens},
                 {"temperature", 0.0},
                 {"top_p", 1.0},
                 {"stream", opt_.stream}};
    if (!opt_.model.empty()) body["model"] = opt_.model;
    // Sieve's server takes the policy as a request extension object. It is sent for dense
    // too: the server's default policy need not be dense.
    if (opt_.send_policy) {
      body["sieve"] = r.policy ? policy_request_json(*r.policy) : json{{"policy", "dense"}};
    }
    if (opt_.stream) body["stream_options"] = {{"include_usage", true}};

    const std::string path = url_.prefix + "/v1/completions";
    HttpResponse head;
    bool sse = false;
    std::string raw, pending, text, stream_error;
    json usage, timings;
    Completion c;
    bool first = true;
    int64_t chunks = 0;
    double ttft_ms = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const auto on_head = [&](const HttpResponse& h) {
      head = h;
      sse = h.status == 200 &&
            h.header("content-type").find("text/event-stream") != std::string::npos;
    };
    const auto on_body = [&](std::string_view data) {
      if (!sse) {
        raw.append(data);
        return true;
      }
      pending.append(data);
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) != 0) continue;
        std::string payload = line.substr(5);
        while (!payload.empty() && payload.front() == ' ') payload.erase(0, 1);
        if (payload == "[DONE]") continue;
        json j = json::parse(payload, nullptr, false);
        if (j.is_discarded()) {
          stream_error = "a stream event is not JSON: " + payload.substr(0, 200);
          return false;
        }
        if (j.contains("error")) {
          stream_error = "the server reported an error: " + j["error"].dump();
          return false;
        }
        const std::string piece = choice_text(j);
        if (!piece.empty()) {
          if (first) {
            ttft_ms = ms_since(t0);
            first = false;
          }
          ++chunks;
          text += piece;
          // Closing the connection is how a streaming client cancels a completion.
          if (r.stop_at_newline && answer_line_end(text) != std::string::npos) return false;
        }
        if (j.contains("usage") && j["usage"].is_object()) usage = j["usage"];
        if (j.contains("timings") && j["timings"].is_object()) timings = j["timings"];
        read_sieve_stats(j, c);
      }
      return true;
    };
    const std::vector<std::pair<std::string, std::string>> headers = {
        {"Content-Type", "application/json"},
        {"Accept", opt_.stream ? "text/event-stream" : "application/json"}};
    const Status st =
        http_post(url_, path, headers, body.dump(-1, ' ', false, json::error_handler_t::replace),
                  opt_.timeout_s, on_head, on_body);
    const double total_ms = ms_since(t0);
    if (!st) return make_error("--server {}: {}", opt_.url, st.message());
    if (!stream_error.empty()) return make_error("--server {}: {}", opt_.url, stream_error);
    if (head.status != 200) {
      return make_error("--server {}: POST {} answered HTTP {}: {}", opt_.url, path, head.status,
                        raw.substr(0, 300));
    }
    c.prompt_tokens = static_cast<int64_t>(r.tokens.size());
    if (!sse) {  // a plain JSON answer (a server that does not stream)
      json j = json::parse(raw, nullptr, false);
      if (j.is_discarded()) {
        return make_error("--server {}: the answer is not JSON: {}", opt_.url, raw.substr(0, 200));
      }
      if (j.contains("error")) return make_error("--server {}: {}", opt_.url, j["error"].dump());
      text = choice_text(j);
      if (j.contains("usage")) usage = j["usage"];
      if (j.contains("timings") && j["timings"].is_object()) timings = j["timings"];
      read_sieve_stats(j, c);
      // Without the server's timings the whole time counts as prefill (it cannot be split
      // without streaming).
      c.prefill_ms = total_ms;
    } else {
      // Time to the first streamed text approximates prefill (plus one decode step and the
      // HTTP round trip); the rest is decode.
      c.prefill_ms = first ? total_ms : ttft_ms;
      c.decode_ms = first ? 0 : total_ms - ttft_ms;
    }
    // The server's own timings (llama.cpp's names, which Sieve's server uses too) are exact.
    if (timings.is_object() && timings.contains("prompt_ms")) {
      c.prefill_ms = timings.value("prompt_ms", c.prefill_ms);
      c.decode_ms = timings.value("predicted_ms", c.decode_ms);
    }
    c.text = std::move(text);
    if (r.stop_at_newline) c.text = c.text.substr(0, answer_line_end(c.text));
    c.completion_tokens = chunks;  // one token per event unless usage says otherwise
    if (usage.is_object()) {
      c.prompt_tokens = usage.value("prompt_tokens", c.prompt_tokens);
      c.completion_tokens = usage.value("completion_tokens", c.completion_tokens);
      if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object())
        c.reused_tokens = usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
    }
    c.prefill_tokens = std::max<int64_t>(0, c.prompt_tokens - c.reused_tokens);
    return c;
  }

 private:
  ServerRunnerOptions opt_;
  HttpUrl url_;
};

}  // namespace

Result<std::unique_ptr<Runner_i>> make_server_runner(const ServerRunnerOptions& opt) {
  auto url = parse_http_url(opt.url);
  if (!url) return make_error("--server {}", url.message());
  // A URL given with /v1 or the endpoint already on it is accepted too.
  for (const std::string tail : {"/v1/completions", "/v1"}) {
    std::string& p = url->prefix;
    if (p.size() >= tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0) {
      p.erase(p.size() - tail.size());
      break;
    }
  }
  return std::unique_ptr<Runner_i>(std::make_unique<ServerRunner>(opt, std::move(*url)));
}

}  // namespace sieve::eval

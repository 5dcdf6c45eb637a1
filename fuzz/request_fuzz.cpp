// libFuzzer target for the JSON request validation of every endpoint that takes a body
// (src/server/openai_request.cpp and the calls the handlers in server.cpp make):
// /v1/completions, /v1/chat/completions (with the request's "sieve" policy object, built
// the way Server::request_policy builds it), /tokenize and /detokenize. The first byte picks
// the endpoint, the rest is the body. A bad body must end in ApiError (a 4xx with a message
// and a JSON error body); any other exception escaping is a bug (the server would answer 500).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "model/chat_template.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "sparse/policy_builder.h"

namespace {

using nlohmann::json;
using sieve::server::ApiError;

constexpr std::string_view kChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

sieve::server::RequestLimits limits() {
  sieve::server::RequestLimits l;
  l.n_ctx = 64;
  l.n_vocab = 100;
  l.max_tokens = 64;
  return l;
}

void completions(const json& body, bool chat) {
  static const sieve::PolicyConfig base = *sieve::make_policy("auto");
  const auto g = sieve::server::parse_gen_request(body, chat, limits(), sieve::SamplerParams{});
  if (g.policy_json) {
    sieve::PolicySources src;
    src.base = &base;
    src.request_json = *g.policy_json;
    // File knobs name server-side files: not this target's surface (policy_fuzz has files).
    if (sieve::fuzz::names_special_file(src.request_json)) return;
    auto p = sieve::build_policy(src);
    if (!p) sieve::fuzz::check_message(p.message());
  }
  if (chat) {
    auto text = sieve::apply_chat_template(kChatml, "", g.messages, g.add_generation_prompt);
    if (!text) sieve::fuzz::check_message(text.message());
  }
}

// The field handling of Server::handle_tokenize / handle_detokenize.
void tokenize(const json& body) {
  const auto lim = limits();
  (void)sieve::server::opt_bool(body, "add_special")
      .value_or(sieve::server::opt_bool(body, "add_special_tokens").value_or(true));
  (void)sieve::server::opt_bool(body, "parse_special").value_or(false);
  (void)sieve::server::opt_bool(body, "with_pieces").value_or(false);
  if (body.contains("messages") && !body["messages"].is_null()) {
    const auto msgs = sieve::server::chat_messages(body["messages"], lim);
    auto text = sieve::apply_chat_template(
        kChatml, "", msgs, sieve::server::opt_bool(body, "add_generation_prompt").value_or(true));
    if (!text) sieve::fuzz::check_message(text.message());
  } else {
    std::optional<std::string> text = sieve::server::opt_string(body, "content");
    if (!text) text = sieve::server::opt_string(body, "prompt");
    if (!text) throw ApiError::bad("content", "content (a string) or messages is required");
  }
}

void detokenize(const json& body) {
  if (!body.contains("tokens") || body["tokens"].is_null())
    throw ApiError::bad("tokens", "tokens is required");
  const auto ids = sieve::server::token_array(body["tokens"], "tokens", limits().n_vocab, 1 << 24);
  for (int32_t id : ids)
    if (id < 0 || id >= limits().n_vocab) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sieve::fuzz::Input in(data, size);
  const int endpoint = in.byte() % 4;
  const std::string_view body = in.rest();
  try {
    const json j = sieve::server::parse_body(body, limits());
    if (!j.is_object()) __builtin_trap();
    switch (endpoint) {
      case 0:
        completions(j, false);
        break;
      case 1:
        completions(j, true);
        break;
      case 2:
        tokenize(j);
        break;
      default:
        detokenize(j);
        break;
    }
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
    // The error body the client gets must serialise and parse back.
    const std::string out = sieve::server::error_body(e);
    if (json::parse(out, nullptr, false).is_discarded()) __builtin_trap();
  }
  return 0;
}

#include "server/openai_request.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace sieve::server {
namespace {

using json = nlohmann::json;

const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    default:
      return "null";
  }
}

// Rejects a field this server cannot honour unless it has its neutral value.
void reject_unless(const json& j, const char* name, bool neutral, const char* why) {
  if (field(j, name) && !neutral)
    throw ApiError{400,  fmt::format("{} is not supported: {}", name, why),
                   name, "unsupported_parameter",
                   "",   json::object()};
}

std::string content_text(const json& content, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string text;
    for (size_t k = 0; k < content.size(); ++k) {
      const json& part = content[k];
      if (!part.is_object())
        throw ApiError::bad(param, fmt::format("{}[{}] must be an object", param, k));
      const json* type = field(part, "type");
      if (!type || !type->is_string())
        throw ApiError::bad(param, fmt::format("{}[{}].type must be a string", param, k));
      if (*type != "text") {
        throw ApiError{
            400,
            fmt::format("{}[{}]: content parts of type '{}' are not supported (text only)", param,
                        k, type->get<std::string>()),
            param,
            "unsupported_content",
            "",
            json::object()};
      }
      const json* t = field(part, "text");
      if (!t || !t->is_string())
        throw ApiError::bad(param, fmt::format("{}[{}].text must be a string", param, k));
      text += t->get<std::string>();
    }
    return text;
  }
  throw ApiError::bad(param, fmt::format("{} must be a string or an array of text parts, not {}",
                                         param, type_name(content)));
}

}  // namespace

json parse_body(std::string_view body, const RequestLimits& lim,
                const std::function<void(int64_t)>& charge) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    throw ApiError{400, "the request body is empty; expected a JSON object",
                   "",  "invalid_json",
                   "",  json::object()};
  }
  // Nesting depth first: the parser and the value's destructor must never see 10^5 levels.
  // Values too: a parsed value costs ~50 bytes however short its text ("1," is two), so a
  // body's count bounds the memory the parser would take.
  int depth = 0;
  int64_t n_values = 1;
  bool in_str = false, esc = false;
  for (char c : body) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == ',' || c == '{' || c == '[') n_values++;
    if (c == '"')
      in_str = true;
    else if (c == '{' || c == '[') {
      if (++depth > lim.json_max_depth) {
        throw ApiError{
            400, fmt::format("the JSON body is nested deeper than {} levels", lim.json_max_depth),
            "",  "invalid_json",
            "",  json::object()};
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  if (n_values > lim.max_json_values) {
    throw ApiError{413,
                   fmt::format("the JSON body has more than {} values (arrays of token ids "
                               "included); send fewer or shorter prompts",
                               lim.max_json_values),
                   "",
                   "request_too_large",
                   "",
                   json::object()};
  }
  if (charge) charge(static_cast<int64_t>(body.size()) + n_values * 56);
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // e.what() names the byte offset and the problem (no request text is echoed).
    std::string what = e.what();
    if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw ApiError{
        400, "the request body is not valid JSON: " + what, "", "invalid_json", "", json::object()};
  }
  if (!j.is_object()) {
    throw ApiError{400, fmt::format("the request body must be a JSON object, not {}", type_name(j)),
                   "",  "invalid_json",
                   "",  json::object()};
  }
  return j;
}

std::optional<bool> opt_bool(const json& j, const char* name) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw ApiError::bad(name, fmt::format("{} must be a boolean, not {}", name, type_name(*v)));
  return v->get<bool>();
}

std::optional<int64_t> opt_int(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  const std::string range = fmt::format("[{}, {}]", lo, hi);
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        static_cast<int64_t>(u) > hi)
      throw ApiError::bad(name, fmt::format("{} = {} is outside {}", name, u, range));
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi)
      throw ApiError::bad(name, fmt::format("{} = {} is outside {}", name, i, range));
    return i;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      throw ApiError::bad(name, fmt::format("{} must be an integer in {}, not {}", name, range, d));
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
      throw ApiError::bad(name, fmt::format("{} = {} is outside {}", name, d, range));
    return static_cast<int64_t>(d);
  }
  throw ApiError::bad(
      name, fmt::format("{} must be an integer in {}, not {}", name, range, type_name(*v)));
}

std::optional<double> opt_number(const json& j, const char* name, double lo, double hi,
                                 bool lo_open) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number())
    throw ApiError::bad(name, fmt::format("{} must be a number, not {}", name, type_name(*v)));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d > hi || d < lo || (lo_open && d == lo)) {
    throw ApiError::bad(
        name, fmt::format("{} = {} is outside {}{}, {}]", name, d, lo_open ? "(" : "[", lo, hi));
  }
  return d;
}

std::optional<std::string> opt_string(const json& j, const char* name) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_string())
    throw ApiError::bad(name, fmt::format("{} must be a string, not {}", name, type_name(*v)));
  return v->get<std::string>();
}

std::vector<int32_t> token_array(const json& a, const char* name, int32_t n_vocab, size_t max_len) {
  if (!a.is_array())
    throw ApiError::bad(name, fmt::format("{} must be an array of token ids", name));
  if (a.size() > max_len) {
    throw ApiError::bad(
        name, fmt::format("{} has {} token ids; at most {} are accepted", name, a.size(), max_len));
  }
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const json& v = a[i];
    int64_t id = -1;
    bool ok = false;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      ok = u < static_cast<uint64_t>(n_vocab);
      id = ok ? static_cast<int64_t>(u) : -1;
    } else if (v.is_number_integer()) {
      id = v.get<int64_t>();
      ok = id >= 0 && id < n_vocab;
    }
    if (!ok) {
      throw ApiError{400,
                     fmt::format("{}[{}] = {} is not a token id: ids are integers in [0, {})", name,
                                 i, v.dump(), n_vocab),
                     name,
                     "invalid_token_id",
                     "",
                     json::object()};
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<ChatMessage> chat_messages(const json& a, const RequestLimits& lim) {
  if (!a.is_array())
    throw ApiError::bad("messages", fmt::format("messages must be an array, not {}", type_name(a)));
  if (a.empty()) throw ApiError::bad("messages", "messages is empty; send at least one message");
  if (a.size() > static_cast<size_t>(lim.max_messages)) {
    throw ApiError::bad("messages", fmt::format("{} messages; at most {} are accepted", a.size(),
                                                lim.max_messages));
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < a.size(); ++i) {
    const json& m = a[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw ApiError::bad(param, param + " must be an object");
    const json* role = field(m, "role");
    if (!role || !role->is_string())
      throw ApiError::bad(param + ".role", param + ".role must be a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant") {
      throw ApiError::bad(param + ".role",
                          fmt::format("{}.role '{}' is not supported; valid roles: system, "
                                      "developer, user, assistant",
                                      param, role->get<std::string>()));
    }
    if (field(m, "tool_calls")) {
      throw ApiError{400,
                     param + ": tool calls are not supported",
                     param + ".tool_calls",
                     "unsupported_parameter",
                     "",
                     json::object()};
    }
    const json* content = field(m, "content");
    if (!content) throw ApiError::bad(param + ".content", param + ".content is missing or null");
    out.push_back({r, content_text(*content, i)});
  }
  return out;
}

GenRequest parse_gen_request(const json& j, bool chat, const RequestLimits& lim,
                             const SamplerParams& defaults) {
  GenRequest g;
  g.chat = chat;
  g.sampling = defaults;
  g.model = opt_string(j, "model").value_or("");

  if (chat) {
    const json* msgs = field(j, "messages");
    if (!msgs) throw ApiError::bad("messages", "messages is required");
    g.messages = chat_messages(*msgs, lim);
    g.add_generation_prompt = opt_bool(j, "add_generation_prompt").value_or(true);
  } else {
    const json* p = field(j, "prompt");
    if (!p) throw ApiError::bad("prompt", "prompt is required");
    const size_t max_ids = static_cast<size_t>(lim.n_ctx) * 2 + 16;
    auto one = [&](const json& v) {
      GenRequest::Prompt pr;
      if (v.is_string()) {
        pr.text = v.get<std::string>();
        if (pr.text.empty()) throw ApiError::bad("prompt", "prompt is empty");
      } else {
        pr.tokens = token_array(v, "prompt", lim.n_vocab, max_ids);
        pr.is_tokens = true;
        if (pr.tokens.empty()) throw ApiError::bad("prompt", "prompt is an empty array");
      }
      g.prompts.push_back(std::move(pr));
    };
    if (p->is_string()) {
      one(*p);
    } else if (p->is_array()) {
      if (p->empty()) throw ApiError::bad("prompt", "prompt is an empty array");
      const json& first = (*p)[0];
      if (first.is_string() || first.is_array()) {
        // a batch of prompts: one choice each, in order (index)
        if (p->size() > static_cast<size_t>(lim.max_prompts)) {
          throw ApiError::bad("prompt", fmt::format("prompt is a batch of {} prompts; at most {}",
                                                    p->size(), lim.max_prompts));
        }
        for (size_t i = 0; i < p->size(); ++i) {
          const json& e = (*p)[i];
          if (!e.is_string() && !e.is_array()) {
            throw ApiError::bad("prompt",
                                fmt::format("prompt[{}] must be a string or an array of token "
                                            "ids, not {}",
                                            i, type_name(e)));
          }
          one(e);
        }
      } else {
        one(*p);
      }
    } else {
      throw ApiError::bad(
          "prompt",
          fmt::format("prompt must be a string or an array of token ids, not {}", type_name(*p)));
    }
    reject_unless(j, "suffix", false, "this server does not fill in the middle");
    g.echo = opt_bool(j, "echo").value_or(false);
    if (auto lp = opt_int(j, "logprobs", 0, lim.max_logprobs)) {
      g.logprobs = true;
      g.top_logprobs = static_cast<int32_t>(*lp);
    }
  }

  // lengths
  const char* mt_name =
      chat && field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto mt = opt_int(j, mt_name, 0, lim.max_tokens)) g.max_tokens = static_cast<int32_t>(*mt);
  if (auto n = opt_int(j, "n", 1, 1 << 20); n && *n != 1)
    throw ApiError{
        400, fmt::format("n = {} is not supported: each request generates one choice (n = 1)", *n),
        "n", "unsupported_parameter",
        "",  json::object()};
  if (auto b = opt_int(j, "best_of", 1, 1 << 20); b && *b != 1)
    throw ApiError{400,       "best_of > 1 is not supported",
                   "best_of", "unsupported_parameter",
                   "",        json::object()};

  // sampling
  SamplerParams& s = g.sampling;
  if (auto t = opt_number(j, "temperature", 0, 100)) s.temperature = static_cast<float>(*t);
  if (auto p = opt_number(j, "top_p", 0, 1)) {
    if (*p == 0) {  // the smallest set with mass >= 0: the top token alone
      s.top_k = 1;
      s.top_p = 1;
    } else {
      s.top_p = static_cast<float>(*p);
    }
  }
  if (auto k = opt_int(j, "top_k", -1, std::numeric_limits<int32_t>::max()))
    s.top_k = *k <= 0 ? 0 : static_cast<int32_t>(*k);
  if (auto m = opt_number(j, "min_p", 0, 1)) s.min_p = static_cast<float>(*m);
  if (auto p = opt_number(j, "presence_penalty", -2, 2))
    s.presence_penalty = static_cast<float>(*p);
  if (auto f = opt_number(j, "frequency_penalty", -2, 2))
    s.frequency_penalty = static_cast<float>(*f);
  for (const char* name : {"repetition_penalty", "repeat_penalty"})
    if (auto r = opt_number(j, name, 0, 10, /*lo_open=*/true))
      s.repeat_penalty = static_cast<float>(*r);
  if (auto n = opt_int(j, "penalty_last_n", -1, 1 << 24))
    s.penalty_last_n = static_cast<int32_t>(*n);
  if (const json* seed = field(j, "seed")) {
    if (seed->is_number_unsigned()) {
      s.seed = seed->get<uint64_t>();
    } else if (seed->is_number_integer()) {
      const int64_t v = seed->get<int64_t>();
      if (v < -1)
        throw ApiError::bad("seed",
                            fmt::format("seed = {} is outside [-1, 2^64 - 1] (-1: random)", v));
      if (v >= 0) s.seed = static_cast<uint64_t>(v);
    } else {
      throw ApiError::bad("seed", fmt::format("seed must be an integer in [-1, 2^64 - 1], not {}",
                                              type_name(*seed)));
    }
    g.seed_given =
        !(seed->is_number_integer() && !seed->is_number_unsigned() && seed->get<int64_t>() == -1);
  }
  if (Status st = validate(s); !st) throw ApiError::bad("", st.message());

  // stop strings
  if (const json* st = field(j, "stop")) {
    std::vector<const json*> items;
    if (st->is_string())
      items.push_back(st);
    else if (st->is_array()) {
      if (st->size() > static_cast<size_t>(lim.max_stop))
        throw ApiError::bad(
            "stop", fmt::format("stop has {} entries; at most {}", st->size(), lim.max_stop));
      for (const json& e : *st) items.push_back(&e);
    } else {
      throw ApiError::bad(
          "stop",
          fmt::format("stop must be a string or an array of strings, not {}", type_name(*st)));
    }
    for (const json* e : items) {
      if (!e->is_string()) throw ApiError::bad("stop", "stop entries must be strings");
      std::string v = e->get<std::string>();
      if (v.size() > static_cast<size_t>(lim.max_stop_bytes))
        throw ApiError::bad("stop", fmt::format("a stop string of {} bytes; at most {}", v.size(),
                                                lim.max_stop_bytes));
      if (!v.empty()) g.stop.push_back(std::move(v));
    }
  }
  g.ignore_eos = opt_bool(j, "ignore_eos").value_or(false);
  // llama.cpp's parse_special: control-token texts in the prompt (completions) or in message
  // content (chat) become special tokens. Off: they are text, and a user cannot forge turns.
  g.parse_special = opt_bool(j, "parse_special").value_or(false);

  // streaming
  g.stream = opt_bool(j, "stream").value_or(false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) throw ApiError::bad("stream_options", "stream_options must be an object");
    g.include_usage = opt_bool(*so, "include_usage").value_or(false);
  }
  g.return_progress = opt_bool(j, "return_progress").value_or(false);
  // vLLM's priority scheduling: lower runs first; ties go by arrival.
  if (auto pr = opt_int(j, "priority", std::numeric_limits<int32_t>::min(),
                        std::numeric_limits<int32_t>::max()))
    g.priority = static_cast<int32_t>(*pr);

  // chat logprobs
  if (chat) {
    g.logprobs = opt_bool(j, "logprobs").value_or(false);
    if (auto tl = opt_int(j, "top_logprobs", 0, lim.max_logprobs)) {
      if (!g.logprobs && *tl > 0)
        throw ApiError::bad("top_logprobs", "top_logprobs needs logprobs: true");
      g.top_logprobs = static_cast<int32_t>(*tl);
    }
    if (const json* rf = field(j, "response_format")) {
      const bool text = rf->is_object() && rf->contains("type") && (*rf)["type"] == "text";
      reject_unless(j, "response_format", text, "only {\"type\": \"text\"} is available");
    }
    if (const json* tools = field(j, "tools"))
      reject_unless(j, "tools", tools->is_array() && tools->empty(),
                    "tool calling is not available");
    if (const json* tc = field(j, "tool_choice"))
      reject_unless(j, "tool_choice", tc->is_string() && *tc == "none",
                    "tool calling is not available");
    reject_unless(j, "functions", false, "function calling is not available");
  }

  // unsupported sampling controls
  if (const json* lb = field(j, "logit_bias"))
    reject_unless(j, "logit_bias", lb->is_object() && lb->empty(), "the sampler has no logit bias");

  // the sparse-attention policy
  if (const json* sv = field(j, "sieve")) {
    if (!sv->is_object())
      throw ApiError::bad("sieve", "sieve must be an object: {\"policy\": NAME, knob: value, ...}");
    g.policy_json = sv->dump();
  } else if (const json* pol = field(j, "policy")) {  // short form: a preset name, no knobs
    if (!pol->is_string()) throw ApiError::bad("policy", "policy must be a preset name (a string)");
    g.policy_json = json{{"policy", *pol}}.dump();
  }
  return g;
}

}  // namespace sieve::server

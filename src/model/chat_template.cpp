#include "model/chat_template.h"

namespace sieve {

namespace {

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Jinja string literals may spell a newline either as a real newline or as "\n".
std::string unescape_jinja_literal(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      switch (c) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        default:
          out.push_back(c);
      }
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The literal default system prompt of a ChatML template, if it has one: the text between
// "<|im_start|>system\n" and "<|im_end|>" inside one string literal (no Jinja expressions
// or string concatenation in between).
std::string chatml_default_system(std::string_view tmpl) {
  for (std::string_view head :
       {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    size_t pos = 0;
    while ((pos = tmpl.find(head, pos)) != std::string_view::npos) {
      const size_t start = pos + head.size();
      const size_t end = tmpl.find("<|im_end|>", start);
      pos = start;
      if (end == std::string_view::npos) break;
      const std::string_view body = tmpl.substr(start, end - start);
      if (body.empty() || contains(body, "{{") || contains(body, "{%") || contains(body, "'") ||
          contains(body, "\"")) {
        continue;  // an expression (e.g. messages[0]['content']), not a literal default
      }
      return unescape_jinja_literal(body);
    }
  }
  return {};
}

// Python's str.strip() over ASCII whitespace and the separators it also strips.
std::string_view jinja_trim(std::string_view s) {
  auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
           (c >= '\x1c' && c <= '\x1f');
  };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Appends message text and records where it lies (it is the user's, not the template's).
void append_content(RenderedChat& r, std::string_view text) {
  if (text.empty()) return;
  r.content.emplace_back(r.text.size(), text.size());
  r.text += text;
}

Result<RenderedChat> render_chatml(const ChatTemplateInfo& info, std::span<const ChatMessage> msgs,
                                   bool add_generation_prompt) {
  RenderedChat r;
  std::string& out = r.text;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return make_error("chat message {} has role '{}'; expected system, user or assistant", i,
                        m.role);
    }
    if (i == 0 && m.role != "system" && !info.default_system.empty()) {
      out += "<|im_start|>system\n";
      out += info.default_system;
      out += "<|im_end|>\n";
    }
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    append_content(r, m.content);
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return r;
}

Result<RenderedChat> render_gemma(std::span<const ChatMessage> msgs, bool add_generation_prompt,
                                  std::string_view bos_text) {
  RenderedChat r;
  std::string& out = r.text;
  out = bos_text;
  const ChatMessage* system = nullptr;
  size_t begin = 0;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = &msgs[0];
    begin = 1;
  }
  for (size_t i = begin; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    const bool want_user = (i - begin) % 2 == 0;
    if ((want_user && m.role != "user") || (!want_user && m.role != "assistant")) {
      return make_error(
          "chat message {} has role '{}' but Gemma's template needs an optional "
          "system message first, then user and assistant turns alternating "
          "(starting with user)",
          i, m.role);
    }
    out += "<start_of_turn>";
    out += want_user ? "user" : "model";
    out += '\n';
    if (i == begin && system) {
      append_content(r, system->content);
      out += "\n\n";
    }
    append_content(r, jinja_trim(m.content));
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return r;
}

}  // namespace

Result<ChatTemplateInfo> detect_chat_template(std::string_view tmpl) {
  if (tmpl.empty()) {
    return make_error(
        "the model file has no chat template (tokenizer.chat_template); run "
        "without --chat and give the prompt as plain text");
  }
  ChatTemplateInfo info;
  if (contains(tmpl, "<start_of_turn>") && contains(tmpl, "<end_of_turn>")) {
    info.kind = ChatTemplateKind::gemma;
    return info;
  }
  if (contains(tmpl, "<|im_start|>") && contains(tmpl, "<|im_end|>")) {
    info.kind = ChatTemplateKind::chatml;
    info.default_system = chatml_default_system(tmpl);
    return info;
  }
  constexpr size_t kShown = 120;
  return make_error(
      "the model's chat template is not one Sieve recognises (supported: ChatML "
      "with <|im_start|>/<|im_end|>, Gemma with <start_of_turn>/<end_of_turn>); "
      "run without --chat and format the prompt yourself. Template begins: {}{}",
      tmpl.substr(0, kShown), tmpl.size() > kShown ? "..." : "");
}

Result<RenderedChat> render_chat_parts(const ChatTemplateInfo& info,
                                       std::span<const ChatMessage> msgs,
                                       bool add_generation_prompt, std::string_view bos_text) {
  switch (info.kind) {
    case ChatTemplateKind::chatml:
      return render_chatml(info, msgs, add_generation_prompt);
    case ChatTemplateKind::gemma:
      return render_gemma(msgs, add_generation_prompt, bos_text);
  }
  return make_error("internal: unknown chat template kind");
}

Result<std::string> render_chat(const ChatTemplateInfo& info, std::span<const ChatMessage> msgs,
                                bool add_generation_prompt, std::string_view bos_text) {
  auto r = render_chat_parts(info, msgs, add_generation_prompt, bos_text);
  if (!r) return r.error();
  return std::move(r->text);
}

Result<std::string> apply_chat_template(std::string_view tmpl, std::string_view bos_text,
                                        std::span<const ChatMessage> msgs,
                                        bool add_generation_prompt) {
  auto info = detect_chat_template(tmpl);
  if (!info) return info.error();
  return render_chat(*info, msgs, add_generation_prompt, bos_text);
}

Result<std::string> apply_chat_template(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                        bool add_generation_prompt) {
  // encode(add_bos=true) adds BOS when the model asks for it; the template must then not
  // print it too (llama.cpp strips it for the same reason).
  const std::string_view bos_text =
      tok.add_bos() || tok.bos_id() < 0 ? std::string_view() : tok.token_text(tok.bos_id());
  return apply_chat_template(tok.chat_template(), bos_text, msgs, add_generation_prompt);
}

Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                         bool add_generation_prompt, bool parse_special_content) {
  auto info = detect_chat_template(tok.chat_template());
  if (!info) return info.error();
  const std::string_view bos_text =
      tok.add_bos() || tok.bos_id() < 0 ? std::string_view() : tok.token_text(tok.bos_id());
  auto r = render_chat_parts(*info, msgs, add_generation_prompt, bos_text);
  if (!r) return r.error();
  const std::string_view text = r->text;
  std::vector<TextSpan> spans;
  size_t at = 0;
  for (const auto& [off, len] : r->content) {
    if (off > at) spans.push_back({text.substr(at, off - at), true});
    spans.push_back({text.substr(off, len), parse_special_content});
    at = off + len;
  }
  if (at < text.size()) spans.push_back({text.substr(at), true});
  return tok.encode_spans(spans, true);
}

}  // namespace sieve

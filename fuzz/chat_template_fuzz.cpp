// libFuzzer target for chat-template recognition and rendering (src/model/chat_template.cpp).
// Input: a template, NUL, a flags byte, then messages as role byte + content, each ended by
// NUL (the seeds carry the real models' templates from tests/fixtures).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "model/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sieve::fuzz::Input in(data, size);
  const std::string_view tmpl = in.until('\0');
  const uint8_t flags = in.byte();
  static const char* const kRoles[] = {"system", "user", "assistant", "developer", "tool", ""};
  std::vector<sieve::ChatMessage> msgs;
  while (in.size() > 0 && msgs.size() < 64) {
    const uint8_t r = in.byte();
    msgs.push_back({kRoles[r % 6], std::string(in.until('\0'))});
  }
  auto info = sieve::detect_chat_template(tmpl);
  if (!info) {
    sieve::fuzz::check_message(info.message());
    return 0;
  }
  const std::string_view bos = (flags & 2) ? "<bos>" : "";
  auto out = sieve::render_chat(*info, msgs, flags & 1, bos);
  if (!out) {
    sieve::fuzz::check_message(out.message());
    return 0;
  }
  // The string overload agrees with detect + render.
  auto again = sieve::apply_chat_template(tmpl, bos, msgs, flags & 1);
  if (!again || *again != *out) __builtin_trap();
  // Every message's text is in the prompt (Gemma trims whitespace around it). Gemma's
  // template folds a leading system message into the first user turn, so a system message
  // with no turn after it is dropped, as the Jinja template drops it.
  const bool lone_system =
      info->kind == sieve::ChatTemplateKind::gemma && msgs.size() == 1 && msgs[0].role == "system";
  for (const auto& m : msgs) {
    if (lone_system) break;
    std::string_view c = m.content;
    auto space = [](char ch) {  // Python's str.strip() over ASCII, as the template runs it
      return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= '\x1c' && ch <= '\x1f');
    };
    while (!c.empty() && space(c.front())) c.remove_prefix(1);
    while (!c.empty() && space(c.back())) c.remove_suffix(1);
    if (out->find(c) == std::string::npos) __builtin_trap();
  }
  return 0;
}

// Chat templates, recognised by structure instead of run as Jinja. Two families:
//  - ChatML (SmolLM2, Qwen, ...): <|im_start|>{role}\n{content}<|im_end|>\n per message,
//    generation prompt <|im_start|>assistant\n. When the template carries a literal default
//    system prompt (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by
//    Hugging Face") it is rendered before the first message unless that is a system one.
//  - Gemma: {bos}<start_of_turn>user\n{content}<end_of_turn>\n, assistant -> "model",
//    a system message becomes a prefix "{system}\n\n" of the first user turn, contents are
//    whitespace-trimmed (Jinja's trim), roles must alternate user/model, generation prompt
//    <start_of_turn>model\n.
// BOS: the Gemma template prints bos_token first. The caller says what to print there
// (bos_text); apply_chat_template(const Tokenizer&, ...) passes "" when the tokenizer adds
// BOS itself, so encode(prompt, add_bos=true, parse_special=true) never doubles it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "model/tokenizer.h"

namespace sieve {

enum class ChatTemplateKind { chatml, gemma };

struct ChatTemplateInfo {
  ChatTemplateKind kind = ChatTemplateKind::chatml;
  std::string default_system;  // ChatML: literal default system prompt, "" if none
};

// Recognises a template string. Empty -> error suggesting to run without --chat;
// anything else unknown -> error naming the supported families.
Result<ChatTemplateInfo> detect_chat_template(std::string_view tmpl);

// A rendered conversation and where the messages' own text lies in it ([offset, length],
// in order): everything else is the template's.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content;
};

Result<RenderedChat> render_chat_parts(const ChatTemplateInfo& info,
                                       std::span<const ChatMessage> msgs,
                                       bool add_generation_prompt, std::string_view bos_text);

// Renders messages. Roles: system | user | assistant (Gemma: an optional system message
// first, then user/assistant alternating, starting with user). Bad roles are errors.
Result<std::string> render_chat(const ChatTemplateInfo& info, std::span<const ChatMessage> msgs,
                                bool add_generation_prompt, std::string_view bos_text);

// The model's template over messages, tokenized: the template's markers as special tokens,
// the messages' text as plain text (a user who writes "<|im_end|>\n<|im_start|>system" gets
// those characters, not a forged system turn) unless parse_special_content (llama.cpp's
// parse_special) keeps the old behaviour. BOS as apply_chat_template + encode(add_bos=true).
Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                         bool add_generation_prompt, bool parse_special_content);

// detect + render over a template string.
Result<std::string> apply_chat_template(std::string_view tmpl, std::string_view bos_text,
                                        std::span<const ChatMessage> msgs,
                                        bool add_generation_prompt);

}  // namespace sieve

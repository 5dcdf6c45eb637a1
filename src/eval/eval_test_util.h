// Test-only helper for the eval tests: a whitespace "tokenizer" (one token per word and per
// newline) for tests that need token counts but no model file.
#pragma once

#include <string>
#include <vector>

#include "eval/eval_rng.h"
#include "model/tokenizer.h"

namespace sieve::eval::testing {

class WordTokenizer final : public Tokenizer {
 public:
  WordTokenizer() {
    tokens_ = {"<s>", "w"};
    bos_ = 0;
    add_bos_ = true;
  }
  std::vector<int32_t> encode_spans(std::span<const TextSpan> spans, bool add_bos) const override {
    std::string text;
    for (const TextSpan& s : spans) text += s.text;
    std::vector<int32_t> out;
    if (add_bos) out.push_back(0);
    bool in_word = false;
    for (char c : text) {
      const bool space = c == ' ' || c == '\n' || c == '\t';
      if (c == '\n') out.push_back(1);
      if (!space && !in_word)
        out.push_back(static_cast<int32_t>(1 + (fnv1a64(std::string_view(&c, 1)) % 1000)));
      in_word = !space;
    }
    return out;
  }
  std::string token_to_piece(int32_t, bool) const override { return "w"; }
  std::string_view model_name() const override { return "words"; }
  int32_t find_token(std::string_view) const override { return -1; }
};

}  // namespace sieve::eval::testing

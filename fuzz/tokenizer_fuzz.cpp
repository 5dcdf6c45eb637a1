// libFuzzer target for the tokenizers: arbitrary bytes to encode and arbitrary token ids to
// decode, on byte-level BPE (the smollm and qwen2 pre-tokenizers) and SentencePiece (with and
// without the space prefix). Small hand-built vocabularies are always there; the real ones
// (smollm2, qwen2.5-coder-0.5b, gemma3-270m) join them when the test model directories hold
// the files (src/gguf/test_models.h; CI pulls them). The first input byte picks the
// tokenizer, the second the mode and flags, the rest is text or little-endian int32 ids.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "gguf/gguf_file.h"
#include "gguf/test_models.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

namespace {

using sieve::TokenizerVocab;
using sieve::TokenType;

TokenizerVocab tiny_bpe(const char* pre) {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = pre;
  for (int b = 0; b < 256; ++b)
    v.tokens.push_back(sieve::gpt2_byte_to_utf8(static_cast<uint8_t>(b)));
  v.merges = {"h e",    "l l",     "he ll", "hell o", "Ġ w", "Ġw o",  "Ġwo r",
              "Ġwor l", "Ġworl d", "a a",   "aa aa",  "1 2", "Ġ t",   "Ġt h",
              "Ġth e",  "i n",     "Ġ in",  "Ċ Ċ",    "Ġ Ġ", "ĠĠ ĠĠ", "Ã ©"};
  for (const std::string& m : v.merges) {
    std::string joined = m;
    joined.erase(joined.find(' ', 1), 1);
    v.tokens.push_back(joined);
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) v.tokens.push_back(s);
  v.tokens.push_back("<|user|>");
  v.types.assign(v.tokens.size(), TokenType::normal);
  const int32_t n = static_cast<int32_t>(v.tokens.size());
  for (int32_t i = n - 4; i < n - 1; ++i) v.types[i] = TokenType::control;
  v.types[n - 1] = TokenType::user_defined;
  v.bos = v.eos = n - 4;
  v.eot = n - 2;
  return v;
}

TokenizerVocab tiny_spm(bool add_space_prefix) {
  TokenizerVocab v;
  v.model = "llama";
  auto add = [&](std::string text, float score, TokenType type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, TokenType::unknown);
  add("<s>", 0, TokenType::control);
  add("</s>", 0, TokenType::control);
  add("<start_of_turn>", 0, TokenType::control);
  add("<end_of_turn>", 0, TokenType::control);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, TokenType::byte);
  }
  const std::string sp = "\xE2\x96\x81";
  for (std::string c : {"a", "b", "c", "h", "i", "e", "\xC3\xA9"}) add(c, -10, TokenType::normal);
  add(sp, -5, TokenType::normal);
  add("ab", -1, TokenType::normal);
  add("bc", -2, TokenType::normal);
  add("abc", -3, TokenType::normal);
  add(sp + "hi", -1, TokenType::normal);
  add("hi", -2, TokenType::normal);
  add(sp + "h", -4, TokenType::normal);
  add(sp + sp, -6, TokenType::normal);
  add("\n\n", 0, TokenType::user_defined);
  add("<unused0>", 0, TokenType::unused);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_space_prefix = add_space_prefix;
  return v;
}

// Bytes a vocabulary has no token for are dropped by encode (SmolLM2 lacks 0x04, 0x06, ...;
// llama.cpp drops them too), so texts holding one do not round-trip.
struct Entry {
  std::unique_ptr<sieve::Tokenizer> tok;
  std::array<bool, 256> byte_missing{};
};

Entry entry(std::unique_ptr<sieve::Tokenizer> t) {
  Entry e;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const std::string text = t->model_name() == "gpt2"
                                 ? sieve::gpt2_byte_to_utf8(static_cast<uint8_t>(b))
                                 : std::string(name);
    e.byte_missing[b] = t->find_token(text) < 0;
  }
  e.tok = std::move(t);
  return e;
}

std::vector<Entry> load() {
  std::vector<Entry> toks;
  auto add = [&](TokenizerVocab v) {
    auto t = sieve::Tokenizer::from_vocab(std::move(v));
    if (!t) __builtin_trap();
    toks.push_back(entry(std::move(*t)));
  };
  add(tiny_bpe("smollm"));
  add(tiny_bpe("qwen2"));
  add(tiny_spm(true));
  add(tiny_spm(false));
  for (const char* name : {"smollm2.gguf", "qwen2.5-coder-0.5b.gguf", "gemma3-270m.gguf"}) {
    const std::string path = sieve::test_model_path(name);
    if (path.empty()) continue;
    auto f = sieve::GgufFile::open(path);
    if (!f) continue;
    auto t = sieve::Tokenizer::from_gguf(**f);
    if (!t) __builtin_trap();  // the real vocabularies must load
    std::fprintf(stderr, "tokenizer_fuzz: tokenizer %zu is %s\n", toks.size(), path.c_str());
    toks.push_back(entry(std::move(*t)));
  }
  return toks;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto toks = load();
  sieve::fuzz::Input in(data, size);
  const Entry& e = toks[in.byte() % toks.size()];
  const sieve::Tokenizer& tok = *e.tok;
  const uint8_t flags = in.byte();
  const bool add_bos = flags & 1, parse_special = flags & 2, render_special = flags & 4;
  const bool bpe = tok.model_name() == "gpt2";
  const int32_t n_vocab = tok.n_vocab();

  if (flags & 8) {  // token ids (any int32, in range or not)
    const std::string_view raw = in.rest();
    std::vector<int32_t> ids(raw.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), raw.data(), ids.size() * 4);
    volatile size_t sink = tok.decode(ids, render_special).size();
    for (int32_t id : ids) {
      sink = sink + tok.token_to_piece(id, render_special).size() + tok.token_text(id).size();
      sink = sink + static_cast<size_t>(tok.token_type(id)) + tok.is_eog(id);
      if (!tok.valid_id(id) && !tok.token_to_piece(id, true).empty()) __builtin_trap();
    }
    (void)sink;
    return 0;
  }

  const std::string_view text = in.rest();
  const std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);
  for (int32_t id : ids)
    if (id < 0 || id >= n_vocab) __builtin_trap();
  bool any_token_byte = false;  // a byte the vocabulary has a token for: something comes out
  for (char c : text) any_token_byte = any_token_byte || !e.byte_missing[static_cast<uint8_t>(c)];
  if (any_token_byte && ids.empty()) __builtin_trap();
  const std::string back = tok.decode(ids, render_special);
  // Plain text comes back unchanged: byte-level BPE for valid UTF-8 (invalid bytes become
  // U+FFFD by design), SentencePiece for any bytes (byte fallback) unless the text holds
  // U+2581 itself, which SentencePiece uses for the space.
  if (!add_bos && !parse_special) {
    bool exact =
        bpe ? sieve::utf8_is_valid(text) : text.find("\xE2\x96\x81") == std::string_view::npos;
    for (char c : text) exact = exact && !e.byte_missing[static_cast<uint8_t>(c)];
    // SentencePiece with add_space_prefix puts the prefix space before every text fragment
    // that follows a special token (llama.cpp does the same), so such texts gain spaces.
    for (int32_t id : ids)
      exact = exact &&
              (bpe || tok.token_type(id) == TokenType::normal ||
               tok.token_type(id) == TokenType::byte || tok.token_type(id) == TokenType::unknown);
    if (exact && back != text) {
      std::fprintf(stderr, "round trip: %zu bytes in, %zu bytes back\n", text.size(), back.size());
      __builtin_trap();
    }
  }
  return 0;
}

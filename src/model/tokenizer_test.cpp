// Tokenizer tests on small hand-built vocabularies (algorithm rules, errors, robustness).
// Tests on the real model files live in tokenizer_model_test.cpp.
#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <random>

#include "model/unicode.h"

namespace sieve {
namespace {

// Byte-level vocabulary: the 256 mapped bytes, then merge results, then specials.
TokenizerVocab tiny_bpe() {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = "smollm";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(gpt2_byte_to_utf8(static_cast<uint8_t>(b)));
  // "Ġ" is the mapped space.
  v.merges = {"h e",   "l l",    "he ll",   "hell o", "Ġ w",   "Ġw o",
              "Ġwo r", "Ġwor l", "Ġworl d", "a a",    "aa aa", "1 2"};
  for (const std::string& m : v.merges) {
    std::string joined = m;
    joined.erase(joined.find(' ', 1), 1);
    v.tokens.push_back(joined);
  }
  v.tokens.push_back("<|special|>");
  v.tokens.push_back("<|user|>");
  v.types.assign(v.tokens.size(), TokenType::normal);
  v.types[v.tokens.size() - 2] = TokenType::control;
  v.types[v.tokens.size() - 1] = TokenType::user_defined;
  v.eos = static_cast<int32_t>(v.tokens.size() - 2);
  return v;
}

int32_t id_of(const Tokenizer& t, std::string_view text) {
  return t.find_token(text);
}

TEST(TokenizerBpe, MergesByRank) {
  auto tok = Tokenizer::from_vocab(tiny_bpe());
  ASSERT_TRUE(tok.ok()) << tok.message();
  const Tokenizer& t = **tok;
  const auto ids = t.encode("hello world", false, false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], id_of(t, "hello"));
  EXPECT_EQ(ids[1], id_of(t, "Ġworld"));
  EXPECT_EQ(t.decode(ids), "hello world");
}

TEST(TokenizerBpe, EqualRankPairsMergeLeftFirst) {
  auto tok = Tokenizer::from_vocab(tiny_bpe());
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  // "aaaaa": a a -> aa twice (leftmost first), then aa aa -> aaaa, leaving the last a.
  const std::vector<int32_t> want = {id_of(t, "aaaa"), id_of(t, "a")};
  EXPECT_EQ(t.encode("aaaaa", false, false), want);
}

TEST(TokenizerBpe, SmollmSplitsDigits) {
  auto tok = Tokenizer::from_vocab(tiny_bpe());
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  // "12" is a merge, but the smollm pre-tokenizer puts each digit in its own piece.
  const std::vector<int32_t> want = {id_of(t, "1"), id_of(t, "2")};
  EXPECT_EQ(t.encode("12", false, false), want);
  TokenizerVocab v = tiny_bpe();
  v.pre = "gpt2";
  auto plain = Tokenizer::from_vocab(std::move(v));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->encode("12", false, false), std::vector<int32_t>{id_of(t, "12")});
}

TEST(TokenizerBpe, SpecialTokens) {
  auto tok = Tokenizer::from_vocab(tiny_bpe());
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  const int32_t special = id_of(t, "<|special|>");
  const int32_t user = id_of(t, "<|user|>");
  const auto on = t.encode("hello<|special|>hello<|user|>", false, true);
  const std::vector<int32_t> want_on = {id_of(t, "hello"), special, id_of(t, "hello"), user};
  EXPECT_EQ(on, want_on);
  // Without parse_special the control token is plain text; the user-defined one is still
  // matched (as in HF tokenizers and llama.cpp).
  const auto off = t.encode("hello<|special|>hello<|user|>", false, false);
  EXPECT_EQ(std::count(off.begin(), off.end(), special), 0);
  EXPECT_EQ(off.back(), user);
  EXPECT_EQ(t.decode(off), "hello<|special|>hello<|user|>");
  EXPECT_EQ(t.decode(on), "hellohello<|user|>");  // control tokens render as ""
  EXPECT_EQ(t.decode(on, true), "hello<|special|>hello<|user|>");
  EXPECT_TRUE(t.is_eog(special));
  EXPECT_FALSE(t.is_eog(user));
}

TEST(TokenizerBpe, UnknownPreTokenizerListsSupported) {
  TokenizerVocab v = tiny_bpe();
  v.pre = "deepseek-llm";
  auto tok = Tokenizer::from_vocab(std::move(v));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.message().find("deepseek-llm"), std::string::npos) << tok.message();
  EXPECT_NE(tok.message().find("smollm"), std::string::npos) << tok.message();
  EXPECT_NE(tok.message().find("default"), std::string::npos) << tok.message();
}

TEST(TokenizerBpe, BadMergeIsAnError) {
  TokenizerVocab v = tiny_bpe();
  v.merges.push_back("nospace");
  auto tok = Tokenizer::from_vocab(std::move(v));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.message().find("nospace"), std::string::npos) << tok.message();
}

TEST(TokenizerBpe, InvalidUtf8BecomesReplacementChars) {
  auto tok = Tokenizer::from_vocab(tiny_bpe());
  ASSERT_TRUE(tok.ok());
  const std::string bad = "he\xff\xfe llo\xc3";
  const auto ids = (*tok)->encode(bad, false, false);
  EXPECT_EQ((*tok)->decode(ids), utf8_sanitize(bad));
}

TEST(Tokenizer, RejectsUnsupportedModelAndBadIds) {
  TokenizerVocab v = tiny_bpe();
  v.model = "bert";
  auto r = Tokenizer::from_vocab(std::move(v));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("bert"), std::string::npos);
  EXPECT_NE(r.message().find("gpt2"), std::string::npos);

  TokenizerVocab w = tiny_bpe();
  w.bos = 1 << 20;
  auto s = Tokenizer::from_vocab(std::move(w));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bos_token_id"), std::string::npos) << s.message();

  TokenizerVocab x = tiny_bpe();
  x.types.pop_back();
  EXPECT_FALSE(Tokenizer::from_vocab(std::move(x)).ok());

  TokenizerVocab y;
  y.model = "llama";
  y.tokens = {"a", "b"};
  y.scores = {0.0f};
  auto z = Tokenizer::from_vocab(std::move(y));
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.message().find("scores"), std::string::npos);
}

// SentencePiece vocabulary: chars, a few merges with scores, byte tokens, specials.
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
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, TokenType::byte);
  }
  const std::string sp = "\xE2\x96\x81";
  for (std::string c : {"a", "b", "c", "h", "i"}) add(c, -10, TokenType::normal);
  add(sp, -5, TokenType::normal);
  add("ab", -1, TokenType::normal);
  add("bc", -2, TokenType::normal);  // loses to "ab" in "abc"
  add("abc", -3, TokenType::normal);
  add(sp + "hi", -1, TokenType::normal);
  add("hi", -2, TokenType::normal);
  add(sp + "h", -4, TokenType::normal);
  add("\n\n", 0, TokenType::user_defined);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_space_prefix = add_space_prefix;
  return v;
}

TEST(TokenizerSpm, HighestScoreMergesFirst) {
  auto tok = Tokenizer::from_vocab(tiny_spm(false));
  ASSERT_TRUE(tok.ok()) << tok.message();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.encode("abc", false, false), std::vector<int32_t>{id_of(t, "abc")});
  EXPECT_EQ(t.encode("bcb", false, false), (std::vector<int32_t>{id_of(t, "bc"), id_of(t, "b")}));
  EXPECT_EQ(t.encode("hi hi", false, false),
            (std::vector<int32_t>{id_of(t, "hi"), id_of(t, "\xE2\x96\x81hi")}));
  EXPECT_EQ(t.decode(t.encode("hi hi", false, false)), "hi hi");
}

TEST(TokenizerSpm, BosAndSpacePrefix) {
  auto tok = Tokenizer::from_vocab(tiny_spm(true));
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  EXPECT_TRUE(t.add_bos());  // default for SentencePiece when the key is absent
  const auto ids = t.encode("hi", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, id_of(t, "\xE2\x96\x81hi")}));
  EXPECT_EQ(t.decode(ids), "hi");  // the prefix space is taken back off
  EXPECT_EQ(t.encode("hi", false, false), std::vector<int32_t>{id_of(t, "\xE2\x96\x81hi")});
}

TEST(TokenizerSpm, ByteFallbackAndUserDefined) {
  auto tok = Tokenizer::from_vocab(tiny_spm(false));
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  const std::string text = "a\xC3\xA9\n\nz\xff";
  const auto ids = t.encode(text, false, false);
  const std::vector<int32_t> want = {id_of(t, "a"),    id_of(t, "<0xC3>"), id_of(t, "<0xA9>"),
                                     id_of(t, "\n\n"), id_of(t, "<0x7A>"), id_of(t, "<0xFF>")};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t.decode(ids), text);  // byte fallback round-trips even invalid UTF-8
}

TEST(TokenizerSpm, SpecialOnlyWhenAsked) {
  auto tok = Tokenizer::from_vocab(tiny_spm(false));
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  const auto on = t.encode("a</s>", false, true);
  EXPECT_EQ(on, (std::vector<int32_t>{id_of(t, "a"), 2}));
  const auto off = t.encode("a</s>", false, false);
  EXPECT_EQ(std::count(off.begin(), off.end(), 2), 0);
  EXPECT_EQ(t.decode(off), "a</s>");
}

TEST(Tokenizer, OutOfRangeIdsAreSkipped) {
  for (bool spm : {false, true}) {
    auto tok = spm ? Tokenizer::from_vocab(tiny_spm(false)) : Tokenizer::from_vocab(tiny_bpe());
    ASSERT_TRUE(tok.ok());
    const Tokenizer& t = **tok;
    const std::vector<int32_t> ids = {-1, INT_MIN, t.n_vocab(), INT_MAX, id_of(t, "a")};
    EXPECT_EQ(t.decode(ids), "a");
    EXPECT_EQ(t.token_to_piece(-5), "");
    EXPECT_EQ(t.token_text(t.n_vocab()), "");
    EXPECT_EQ(t.token_type(-1), TokenType::undefined);
    EXPECT_FALSE(t.is_eog(-1));
  }
}

TEST(Tokenizer, RandomBytesNeverCrash) {
  std::mt19937 rng(1234);
  auto bpe = Tokenizer::from_vocab(tiny_bpe());
  auto spm = Tokenizer::from_vocab(tiny_spm(true));
  ASSERT_TRUE(bpe.ok() && spm.ok());
  for (int iter = 0; iter < 500; ++iter) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    for (bool special : {false, true}) {
      const auto a = (*bpe)->encode(s, true, special);
      EXPECT_EQ((*bpe)->decode(a, true), utf8_sanitize(s));
      const auto b = (*spm)->encode(s, false, special);
      for (int32_t id : b) ASSERT_TRUE((*spm)->valid_id(id));
    }
    std::vector<int32_t> ids(rng() % 16);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng());
    (void)(*bpe)->decode(ids);
    (void)(*spm)->decode(ids);
  }
}

}  // namespace
}  // namespace sieve

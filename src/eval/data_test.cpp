// Random streams, word lists and the shipped essay corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>

#include "eval/eval_rng.h"
#include "eval/haystack.h"
#include "eval/word_lists.h"

namespace sieve::eval {
namespace {

TEST(Rng, SameSeedSameStreamDifferentSeedDifferentStream) {
  Rng a(7), b(7);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  Rng d(7), e(8);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += d.next_u64() == e.next_u64();
  EXPECT_EQ(same, 0);
}

TEST(Rng, UniformIntStaysInRangeAndCoversIt) {
  Rng r(1);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const int64_t v = r.uniform_int(-3, 5);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 5);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 9u);
}

TEST(Rng, SampleGivesDistinctValuesDenseAndSparse) {
  Rng r(3);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{10, 10}, {1000, 7}, {50, 20}}) {
    const auto s = r.sample(n, k);
    ASSERT_EQ(static_cast<int64_t>(s.size()), k);
    std::set<int64_t> u(s.begin(), s.end());
    EXPECT_EQ(static_cast<int64_t>(u.size()), k);
    for (int64_t v : s) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, n);
    }
  }
}

TEST(Rng, Uuid4IsCanonicalVersion4) {
  Rng r(5);
  const std::regex re("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string u = r.uuid4();
    EXPECT_TRUE(std::regex_match(u, re)) << u;
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 200u);
}

TEST(Rng, DeriveSeedSeparatesTasksLengthsAndIndices) {
  std::set<uint64_t> s;
  for (const char* t : {"passkey", "vt"}) {
    for (int ctx : {1024, 2048}) {
      for (int i = 0; i < 5; ++i) s.insert(derive_seed(42, t, ctx, i));
    }
  }
  EXPECT_EQ(s.size(), 20u);
  EXPECT_EQ(derive_seed(42, "vt", 1024, 3), derive_seed(42, "vt", 1024, 3));
  EXPECT_NE(derive_seed(42, "vt", 1024, 3), derive_seed(43, "vt", 1024, 3));
}

TEST(WordLists, ListsAreLargeLowercaseAndFreeOfTemplateWords) {
  EXPECT_GE(adjectives().size(), 350u);
  EXPECT_GE(nouns().size(), 700u);
  EXPECT_GE(verbs().size(), 250u);
  EXPECT_GE(all_words().size(), 1300u);
  for (auto list : {adjectives(), nouns(), verbs()}) {
    EXPECT_TRUE(std::is_sorted(list.begin(), list.end()));
    EXPECT_EQ(std::adjacent_find(list.begin(), list.end()), list.end());
    for (const std::string& w : list) {
      for (char c : w) ASSERT_TRUE(std::islower(static_cast<unsigned char>(c))) << w;
    }
  }
  for (const char* banned : {"special", "magic", "hidden", "number", "answer", "secret", "value"}) {
    const auto w = all_words();
    EXPECT_FALSE(std::binary_search(w.begin(), w.end(), std::string(banned))) << banned;
  }
}

TEST(WordLists, PseudoWordsAreDistinctAndNotRealWords) {
  std::set<std::string> seen;
  const auto real = all_words();
  for (uint64_t i = 0; i < 3000; ++i) {
    const std::string w = pseudo_word(i);
    EXPECT_TRUE(seen.insert(w).second) << w;
    EXPECT_FALSE(std::binary_search(real.begin(), real.end(), w)) << w;
  }
  EXPECT_EQ(pseudo_word(17), pseudo_word(17));
}

TEST(Haystack, SplitSentencesKeepsPunctuationAndClosers) {
  const auto s = split_sentences("  One two. Three? \"Four!\" five.6 stays. Last one");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0], "One two.");
  EXPECT_EQ(s[1], "Three?");
  EXPECT_EQ(s[2], "\"Four!\"");
  EXPECT_EQ(s[3], "five.6 stays.");
  EXPECT_EQ(s[4], "Last one");
}

TEST(Haystack, FirstWordsRepeatsTheCorpus) {
  auto c = EssayCorpus::from_text("a b\n c");
  EXPECT_EQ(c->first_words(2), "a b");
  EXPECT_EQ(c->first_words(7), "a b c a b c a");
  EXPECT_NE(EssayCorpus::from_text("a b c")->fingerprint(),
            EssayCorpus::from_text("a b d")->fingerprint());
  EXPECT_EQ(EssayCorpus::from_text("a  b c")->fingerprint(), c->fingerprint());
}

TEST(Haystack, ShippedEssaysAreFoundAndFitForHaystacks) {
  auto path = find_data_file("haystack/essays.txt", std::string(SIEVE_SOURCE_DIR) + "/data");
  ASSERT_TRUE(path.ok()) << path.message();
  auto c = EssayCorpus::load(*path);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_GE((*c)->words().size(), 8000u);
  // Digits in the haystack would compete with the numeric needles.
  for (const std::string& w : (*c)->words()) {
    for (char ch : w) ASSERT_FALSE(std::isdigit(static_cast<unsigned char>(ch))) << w;
  }
  // Without an override the search also finds it (source tree).
  EXPECT_TRUE(find_data_file("haystack/essays.txt").ok());
  auto missing = find_data_file("haystack/nope.txt", "/nonexistent");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("--data-dir"), std::string::npos);
}

}  // namespace
}  // namespace sieve::eval

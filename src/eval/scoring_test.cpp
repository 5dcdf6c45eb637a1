#include "eval/scoring.h"

#include <gtest/gtest.h>

#include <vector>

namespace sieve::eval {
namespace {

TEST(Scoring, RulerPostprocessStripsAndMapsControlCharacters) {
  EXPECT_EQ(ruler_postprocess("  \t 1234\x01"
                              "5\r\n "),
            "1234\n5");
  EXPECT_EQ(ruler_postprocess("\n\n"), "");
}

TEST(Scoring, StringMatchAllCountsFractionCaseInsensitive) {
  const std::vector<std::string> refs = {"Alpha", "beta", "GAMMA", "delta"};
  EXPECT_DOUBLE_EQ(score(Metric::string_match_all, "alpha, BETA and gamma", refs), 0.75);
  EXPECT_DOUBLE_EQ(score(Metric::string_match_all, "nothing here", refs), 0.0);
  EXPECT_DOUBLE_EQ(score(Metric::string_match_all, "delta gamma beta alpha", refs), 1.0);
}

TEST(Scoring, StringMatchPartNeedsOnlyOneReference) {
  const std::vector<std::string> refs = {"Paris", "City of Light"};
  EXPECT_DOUBLE_EQ(score(Metric::string_match_part, "It is paris.", refs), 1.0);
  EXPECT_DOUBLE_EQ(score(Metric::string_match_part, "London", refs), 0.0);
}

TEST(Scoring, FirstIntMatchTakesTheFirstDigitRun) {
  EXPECT_EQ(first_int("The pass key is 04512. Done 99"), "04512");
  EXPECT_EQ(first_int("none"), "");
  const std::vector<std::string> label = {"04512"};
  EXPECT_DOUBLE_EQ(score(Metric::first_int_match, " 04512.", label), 1.0);
  // A longer run is a different number, not a match.
  EXPECT_DOUBLE_EQ(score(Metric::first_int_match, " 045123", label), 0.0);
  EXPECT_DOUBLE_EQ(score(Metric::first_int_match, " 7 then 04512", label), 0.0);
}

TEST(Scoring, KvWordMatchSplitsOnPunctuation) {
  const std::vector<std::string> label = {"6b1d3c2e-6f0a-4b8e-9a51-3f7c2d1e0a9b"};
  EXPECT_DOUBLE_EQ(score(Metric::kv_word_match, "\"6b1d3c2e-6f0a-4b8e-9a51-3f7c2d1e0a9b\".", label),
                   1.0);
  EXPECT_DOUBLE_EQ(
      score(Metric::kv_word_match, "value:6b1d3c2e-6f0a-4b8e-9a51-3f7c2d1e0a9b}", label), 1.0);
  // A prefix of the UUID is not the UUID.
  EXPECT_DOUBLE_EQ(score(Metric::kv_word_match, "6b1d3c2e-6f0a-4b8e", label), 0.0);
  EXPECT_DOUBLE_EQ(score(Metric::kv_word_match, "x6b1d3c2e-6f0a-4b8e-9a51-3f7c2d1e0a9b", label),
                   0.0);
}

TEST(Scoring, MetricNamesRoundTrip) {
  for (Metric m : {Metric::string_match_all, Metric::string_match_part, Metric::first_int_match,
                   Metric::kv_word_match}) {
    EXPECT_EQ(metric_from_name(metric_name(m)), m);
  }
  EXPECT_FALSE(metric_from_name("bleu").has_value());
}

}  // namespace
}  // namespace sieve::eval

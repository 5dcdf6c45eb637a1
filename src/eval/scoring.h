// Scoring rules of the suites, per sample, in [0, 1]:
//  - RULER string_match_all (niah, vt, cwe, fwe): fraction of references found in the
//    prediction, case-insensitive, after RULER's post-processing;
//  - RULER string_match_part (qa): 1 when any reference is found;
//  - InfiniteBench first_int_match (passkey, number_string): the first digit run of the
//    prediction equals the label;
//  - InfiniteBench kv_retrieval: the label is one of the words after replacing
//    \n : " ' . , ? ! { } with spaces.
// Suite accuracies are means of these over samples, reported x100 (RULER's convention).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sieve::eval {

enum class Metric { string_match_all, string_match_part, first_int_match, kv_word_match };

std::string_view metric_name(Metric m);
std::optional<Metric> metric_from_name(std::string_view name);

// RULER's post-processing: strip, control characters [\x00-\x1f] -> '\n', strip again.
std::string ruler_postprocess(std::string_view pred);

// InfiniteBench's first_int_match extraction: the first maximal run of ASCII digits, or "".
std::string first_int(std::string_view pred);

double score(Metric m, std::string_view prediction, std::span<const std::string> references);

}  // namespace sieve::eval

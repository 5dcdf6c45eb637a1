// Word lists for the synthetic tasks: adjective-noun needle keys (RULER's "words" keys) and
// the vocabulary of common-words extraction. The lists are Sieve's own (plain English words,
// lowercase, one token-ish each); words that appear in the task templates ("special",
// "magic", "hidden", "number", "answer", ...) are left out so a key never echoes the question.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sieve::eval {

// Sorted, de-duplicated lists, built once.
std::span<const std::string> adjectives();
std::span<const std::string> nouns();
std::span<const std::string> verbs();

// adjectives + nouns + verbs, sorted and de-duplicated (cwe's vocabulary before shuffling).
std::span<const std::string> all_words();

// The i-th made-up pronounceable word (consonant-vowel syllables, e.g. "tamiro"): extra
// vocabulary when a long list needs more distinct words than the real lists hold. Distinct
// for distinct i, and never equal to a word of all_words().
std::string pseudo_word(uint64_t i);

// RULER's and InfiniteBench's noise line (without the trailing newline).
inline constexpr std::string_view noise_sentence =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
inline constexpr int64_t noise_sentence_words = 18;

// The first n words of the noise line (all of it from noise_sentence_words on): the filler
// that tops a noise haystack up to the exact length.
std::string_view noise_words(int64_t n);

}  // namespace sieve::eval

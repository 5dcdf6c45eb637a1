// Calibration inputs for sieve calibrate (docs/calibrate.md), built deterministically from a
// seed and the essay corpus (data/haystack/essays.txt): needle samples for the retrieval
// scores and natural text for the indexer fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace sieve::cli {

// [BOS] filler... NEEDLE filler... NEEDLE: the same needle tokens early and at the very end
// (nothing after the late copy is needed: its queries are what is measured).
struct NeedleSample {
  std::vector<int32_t> ids;  // [ctx]
  int32_t early_begin = 0;   // first token of the early copy
  int32_t late_begin = 0;    // first token of the late copy (= ctx - needle_len)
  int32_t needle_len = 0;
  std::string needle;  // its text
};

// Sentences of the corpus, loaded once.
struct CalibrationCorpus {
  std::vector<std::string> sentences;
  std::string source;  // path, for messages
};

// Throws UserError when the corpus cannot be found or is empty.
CalibrationCorpus load_calibration_corpus();

// Sample `index` of a run with `seed`: shuffled corpus sentences as filler, one of a fixed
// list of needle sentences, the early copy at a depth drawn from [5%, 45%] of the context.
NeedleSample make_needle_sample(const CalibrationCorpus& corpus, const Tokenizer& tok, int32_t ctx,
                                uint64_t seed, int32_t index);

// Natural text of ctx tokens for the indexer fit: the corpus in order from a sentence drawn
// by (seed, index), wrapping around.
std::vector<int32_t> make_fit_text(const CalibrationCorpus& corpus, const Tokenizer& tok,
                                   int32_t ctx, uint64_t seed, int32_t index);

// A small deterministic generator (splitmix64): the same sequence on every platform, unlike
// the standard distributions.
struct SplitMix {
  uint64_t s;
  uint64_t next();
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

}  // namespace sieve::cli

#include "calibrate_text.h"

#include <fstream>
#include <sstream>

#include "command.h"
#include "eval/haystack.h"

namespace sieve::cli {
namespace {

// Needles: one short, unusual fact each; the sample's seed picks one and uses it twice.
const char* const kNeedles[] = {
    "The special magic number for the harbour of Verlane is 4817293.",
    "Remember this: the blue lantern code of the Okafor archive is TR-5529-QX.",
    "The secret ingredient in grandmother Ilse's plum cake was a spoon of cardamom and 31 raisins.",
    "The password to the lighthouse keeper's cabinet is saffron-otter-802.",
    "In the year 1893 the village of Brennholt elected a goat named Percival as honorary mayor.",
    "The coordinates of the buried compass are 47 degrees north and 12 degrees east.",
};

uint64_t mix_seed(uint64_t seed, int32_t index, uint64_t salt) {
  SplitMix m{seed ^ (salt * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(index) << 32)};
  m.next();
  return m.next();
}

void prepend_bos(const Tokenizer& tok, std::vector<int32_t>& ids) {
  if (tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
}

// Tokens of the sentences from `order`, joined by spaces, at least `need` of them (the list
// is repeated as needed).
std::vector<int32_t> filler_tokens(const CalibrationCorpus& c, const std::vector<size_t>& order,
                                   const Tokenizer& tok, size_t start, int64_t need) {
  std::string text;
  std::vector<int32_t> ids;
  size_t i = start;
  int64_t chars = need * 5;
  for (;;) {
    while (static_cast<int64_t>(text.size()) < chars) {
      if (!text.empty()) text += ' ';
      text += c.sentences[order[i % order.size()]];
      ++i;
    }
    ids = tok.encode(text, false, false);
    if (static_cast<int64_t>(ids.size()) >= need) break;
    chars *= 2;
  }
  ids.resize(need);
  return ids;
}

}  // namespace

uint64_t SplitMix::next() {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

CalibrationCorpus load_calibration_corpus() {
  auto path = eval::find_data_file("haystack/essays.txt");
  if (!path) throw UserError(path.message());
  std::ifstream in(*path, std::ios::binary);
  if (!in) throw UserError("cannot read the calibration corpus " + *path);
  std::stringstream ss;
  ss << in.rdbuf();
  CalibrationCorpus c;
  c.source = *path;
  for (std::string& s : eval::split_sentences(ss.str())) {
    if (s.size() >= 8) c.sentences.push_back(std::move(s));  // headings and stray bits out
  }
  if (c.sentences.size() < 16)
    throw UserError("the calibration corpus " + *path + " has too few sentences");
  return c;
}

NeedleSample make_needle_sample(const CalibrationCorpus& corpus, const Tokenizer& tok, int32_t ctx,
                                uint64_t seed, int32_t index) {
  SplitMix rng{mix_seed(seed, index, 1)};
  std::vector<size_t> order(corpus.sentences.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size() - 1; i > 0; --i)
    std::swap(order[i], order[rng.below(i + 1)]);  // Fisher-Yates
  NeedleSample s;
  constexpr size_t kN = sizeof(kNeedles) / sizeof(kNeedles[0]);
  s.needle = kNeedles[rng.below(kN)];
  // Byte-level BPE keeps the space before a word inside the token; SentencePiece adds its
  // own word-start marker.
  const std::vector<int32_t> needle =
      tok.encode(tok.model_name() == "gpt2" ? " " + s.needle : s.needle, false, false);
  s.needle_len = static_cast<int32_t>(needle.size());
  prepend_bos(tok, s.ids);
  const int64_t n_fill = int64_t{ctx} - static_cast<int64_t>(s.ids.size()) - 2 * s.needle_len;
  if (n_fill < 64) {
    throw UserError("--ctx " + std::to_string(ctx) +
                    " is too short for the needle samples (use at least 256)");
  }
  const std::vector<int32_t> fill = filler_tokens(corpus, order, tok, 0, n_fill);
  const int64_t depth =
      static_cast<int64_t>((0.05 + 0.40 * rng.unit()) * static_cast<double>(n_fill));
  s.ids.insert(s.ids.end(), fill.begin(), fill.begin() + depth);
  s.early_begin = static_cast<int32_t>(s.ids.size());
  s.ids.insert(s.ids.end(), needle.begin(), needle.end());
  s.ids.insert(s.ids.end(), fill.begin() + depth, fill.end());
  s.late_begin = static_cast<int32_t>(s.ids.size());
  s.ids.insert(s.ids.end(), needle.begin(), needle.end());
  return s;
}

std::vector<int32_t> make_fit_text(const CalibrationCorpus& corpus, const Tokenizer& tok,
                                   int32_t ctx, uint64_t seed, int32_t index) {
  SplitMix rng{mix_seed(seed, index, 2)};
  std::vector<size_t> order(corpus.sentences.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<int32_t> ids;
  prepend_bos(tok, ids);
  const std::vector<int32_t> text = filler_tokens(corpus, order, tok, rng.below(order.size()),
                                                  int64_t{ctx} - static_cast<int64_t>(ids.size()));
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
}

}  // namespace sieve::cli

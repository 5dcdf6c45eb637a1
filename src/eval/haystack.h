// Haystack text for the synthetic tasks: the essay corpus shipped in data/haystack/ (Sieve's
// own prose, see docs/eval.md), word truncation with repetition, and sentence splitting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace sieve::eval {

// Finds a file under Sieve's data directory: `dir_override` when given, else
// $SIEVE_DATA_DIR, else data/ in the source tree this library was built from, else data/
// beside the executable's install prefix (../share/sieve/data). The error lists where it looked.
Result<std::string> find_data_file(std::string_view relative, std::string_view dir_override = {});

// The essay corpus as words (whitespace-separated, as RULER's re.sub(r'\s+', ' ') splits).
class EssayCorpus {
 public:
  static Result<std::shared_ptr<const EssayCorpus>> load(const std::string& path);
  static std::shared_ptr<const EssayCorpus> from_text(std::string_view text);

  const std::vector<std::string>& words() const { return words_; }
  // FNV-1a fingerprint of the words: part of every sample's key, so editing the corpus
  // invalidates finished samples instead of silently mixing two haystacks.
  uint64_t fingerprint() const { return fingerprint_; }
  // The first n words joined by single spaces, repeating the corpus when n exceeds it, then
  // the first `pad_chars` letters of the next word (a word cut short, as a haystack trimmed
  // at a token boundary ends): the pad of the essay tasks. Only the word's leading letters
  // are used, so the cut never adds a sentence end.
  std::string first_words(int64_t n, int64_t pad_chars = 0) const;

 private:
  std::vector<std::string> words_;
  uint64_t fingerprint_ = 0;
};

// Splits text into sentences after '.', '!' or '?' (optionally followed by closing quotes or
// brackets) when whitespace follows. Stand-in for nltk's sent_tokenize; abbreviations are
// not special-cased (the shipped essays avoid them). Sentences keep their punctuation and
// lose the separating whitespace.
std::vector<std::string> split_sentences(std::string_view text);

}  // namespace sieve::eval

// Pieces shared by the tokenizer implementations (not part of the model layer's API).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace sieve::tokenizer_detail {

// A stretch of the input: raw text still to tokenize, or a special token already resolved.
struct Fragment {
  int32_t token = -1;  // >= 0: a special token; -1: raw text [offset, offset + length)
  size_t offset = 0;
  size_t length = 0;
};

// Finds the texts of control, user-defined and unknown tokens inside an input, with the
// precedence llama.cpp uses (so ids match it exactly): tokens are taken longest text first
// (equal lengths: lower id first); each one splits every stretch of still-raw text at its
// non-overlapping occurrences, left to right. User-defined tokens are always split out (as
// in HF tokenizers); control and unknown tokens only when parse_special is set.
// A byte trie first finds which special tokens occur at all, so the splitting passes run
// only for those few instead of for all ~6,400 of Gemma 3's.
class SpecialSplitter {
 public:
  // `tokens` must outlive the splitter and not change (it is the tokenizer's own vector).
  void build(const std::vector<std::string>& tokens, const std::vector<TokenType>& types);
  void split(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
  // split() of each span (with its own parse_special) over their concatenation, which is
  // returned (a view of the one span, or of `joined`); neighbouring raw fragments are merged,
  // so text is tokenized across span boundaries as one.
  std::string_view split_spans(std::span<const TextSpan> spans, std::string& joined,
                               std::vector<Fragment>& out) const;
  bool empty() const { return by_rank_.empty(); }

 private:
  struct Node {
    int32_t rank = -1;    // rank of the token ending here, -1 if none
    bool always = false;  // user-defined: matched even without parse_special
    uint32_t first_edge = 0;
    uint32_t n_edges = 0;
  };
  struct Edge {
    uint8_t byte;
    int32_t child;
  };
  int32_t child(int32_t node, uint8_t b) const;

  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<Node> nodes_;                   // nodes_[0] is the root
  std::array<int32_t, 256> root_children_{};  // the root's fan-out is hot: a table
  std::vector<Edge> edges_;                   // other nodes: sorted runs of edges
  std::vector<int32_t> by_rank_;              // claim order -> token id
};

// Builders for the two algorithms; v has been validated by Tokenizer::from_vocab.
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(TokenizerVocab v);
Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(TokenizerVocab v);

// Token text -> id, the innermost lookup of both algorithms (SentencePiece probes every
// candidate pair against a 262K-entry vocabulary). Open addressing over a flat array of
// (hash tag, id) slots: a miss usually costs one cache line and no string compare, which
// std::unordered_map's node chasing does not give. Duplicate texts resolve to the highest
// id, as in llama.cpp.
class TokenIndex {
 public:
  // `tokens` must outlive the index and not change (it is the tokenizer's own vector).
  void build(const std::vector<std::string>& tokens);
  int32_t find(std::string_view text) const;
  static uint64_t hash(std::string_view s);

 private:
  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<uint64_t> slots_;  // 0 = empty, else (tag << 32) | (id + 1)
  uint64_t mask_ = 0;
};

// Pair of ids -> value, open addressing (the BPE merge table).
template <class V>
class PairMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, V{});
    mask_ = cap - 1;
  }
  // Keeps the first value stored for a key.
  void try_emplace(uint64_t key, const V& v) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t i = mix(key) & mask_;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return;
      i = (i + 1) & mask_;
    }
    keys_[i] = key;
    values_[i] = v;
    ++size_;
  }
  const V* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    size_t i = mix(key) & mask_;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return &values_[i];
      i = (i + 1) & mask_;
    }
    return nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are never both 0xFFFFFFFF
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  void grow() {
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<V> values = std::move(values_);
    reserve(std::max<size_t>(size_ * 2, 16));
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] != kEmpty) try_emplace(keys[i], values[i]);
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<V> values_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace sieve::tokenizer_detail

// SentencePiece-style BPE (tokenizer.ggml.model = "llama"), as Gemma and Llama 1/2 use it:
// split special tokens out, optionally prefix a space, spaces -> U+2581, then repeatedly
// merge the adjacent pair whose concatenation is a vocabulary token with the highest score
// (ties: leftmost); characters no token covers become byte-fallback tokens <0xXX>.
#include <algorithm>
#include <cstdio>
#include <limits>

#include "model/tokenizer_internal.h"
#include "model/unicode.h"

namespace sieve::tokenizer_detail {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

class SpmTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerVocab v) {
    auto t = std::unique_ptr<SpmTokenizer>(new SpmTokenizer());
    t->scores_ = std::move(v.scores);
    // A NaN score would break the heap's ordering; such a token just never wins a merge.
    for (float& sc : t->scores_) {
      if (sc != sc) sc = -std::numeric_limits<float>::infinity();
    }
    t->add_space_prefix_ = v.add_space_prefix.value_or(true);
    t->init_common(v, /*default_add_bos=*/true);
    t->strip_leading_space_ = t->add_space_prefix_;
    t->index_.build(t->tokens_);
    // Byte-fallback tokens: the <0xXX> tokens; a vocabulary without them falls back to
    // the single-byte token if any, else <unk>, else the byte is dropped.
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      int32_t id = t->find_token(name);
      if (id < 0) {
        const char c = static_cast<char>(b);
        id = t->find_token(std::string_view(&c, 1));
      }
      if (id < 0) id = v.unk;
      t->byte_token_[b] = id;
    }
    t->specials_.build(t->tokens_, t->types_);
    t->build_pieces();
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  std::string_view model_name() const override { return "llama"; }

  int32_t find_token(std::string_view text) const override { return index_.find(text); }

  std::vector<int32_t> encode_spans(std::span<const TextSpan> spans, bool add_bos) const override {
    std::string joined;
    std::vector<Fragment> frags;
    const std::string_view text = specials_.split_spans(spans, joined, frags);
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_bos && add_bos_) out.push_back(bos_);
    Work work;
    std::string escaped;
    bool prev_special = true;  // the first raw fragment gets the space prefix
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      escaped.clear();
      if (add_space_prefix_ && prev_special) escaped += kSpaceMark;
      for (char c : text.substr(f.offset, f.length)) {
        if (c == ' ') {
          escaped += kSpaceMark;
        } else {
          escaped.push_back(c);
        }
      }
      encode_text(escaped, work, out);
      prev_special = false;
    }
    if (add_bos && add_eos_) out.push_back(eos_);
    return out;
  }

  std::string token_to_piece(int32_t id, bool render_special) const override {
    if (!valid_id(id)) return {};
    switch (types_[id]) {
      case TokenType::control:
      case TokenType::unknown:
        return render_special ? tokens_[id] : std::string();
      case TokenType::unused:
        return {};
      default:
        return pieces_[id];
    }
  }

 private:
  SpmTokenizer() = default;

  // What each token decodes to: U+2581 -> space for normal tokens, the byte for <0xXX>,
  // user-defined tokens as written.
  void build_pieces() {
    pieces_.resize(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const std::string& t = tokens_[i];
      switch (types_[i]) {
        case TokenType::byte: {
          unsigned v = 0;
          if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%2X>", &v) == 1) {
            pieces_[i] = std::string(1, static_cast<char>(v));
          } else {
            pieces_[i] = t;
          }
          break;
        }
        case TokenType::user_defined:
          pieces_[i] = t;
          break;
        default: {
          std::string p;
          p.reserve(t.size());
          for (size_t k = 0; k < t.size();) {
            if (t.compare(k, kSpaceMark.size(), kSpaceMark) == 0) {
              p.push_back(' ');
              k += kSpaceMark.size();
            } else {
              p.push_back(t[k++]);
            }
          }
          pieces_[i] = std::move(p);
        }
      }
    }
  }

  struct Sym {
    uint32_t off;  // into the escaped text; a symbol and its next are contiguous
    uint32_t len;  // 0 once merged into the left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t len;  // bytes of left+right when queued (detects stale entries)
    // Highest score first; ties go to the leftmost pair.
    bool operator<(const Bigram& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  struct Work {
    std::vector<Sym> syms;
    std::vector<Bigram> heap;
  };

  void push_bigram(std::string_view s, Work& w, int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return;
    const Sym& l = w.syms[left];
    const Sym& r = w.syms[right];
    const int32_t id = index_.find(s.substr(l.off, l.len + r.len));
    if (id < 0) return;
    w.heap.push_back({scores_[id], left, right, l.len + r.len});
    std::push_heap(w.heap.begin(), w.heap.end());
  }

  void encode_text(std::string_view s, Work& w, std::vector<int32_t>& out) const {
    if (s.empty()) return;
    w.syms.clear();
    w.heap.clear();
    // Symbols are UTF-8 characters. An invalid byte is a symbol of its own (it ends up as a
    // byte token): llama.cpp trusts the lead byte's length instead, which lets a bad lead
    // byte swallow the following bytes, e.g. half of a U+2581, and decode wrongly. For
    // valid UTF-8 both splits are the same.
    for (size_t off = 0; off < s.size();) {
      size_t len = 1;
      if (static_cast<uint8_t>(s[off]) >= 0x80) {
        size_t end = off;
        uint32_t cp;
        if (utf8_decode(s, end, cp)) len = end - off;
      }
      const auto idx = static_cast<int32_t>(w.syms.size());
      w.syms.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(len), idx - 1,
                        off + len < s.size() ? idx + 1 : -1});
      off += len;
    }
    const auto n = static_cast<int32_t>(w.syms.size());
    for (int32_t i = 1; i < n; ++i) push_bigram(s, w, i - 1, i);
    while (!w.heap.empty()) {
      std::pop_heap(w.heap.begin(), w.heap.end());
      const Bigram bg = w.heap.back();
      w.heap.pop_back();
      Sym& l = w.syms[bg.left];
      Sym& r = w.syms[bg.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len || l.next != bg.right) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) w.syms[r.next].prev = bg.left;
      push_bigram(s, w, l.prev, bg.left);
      push_bigram(s, w, bg.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = w.syms[i].next) {
      const Sym& sym = w.syms[i];
      const std::string_view text = s.substr(sym.off, sym.len);
      if (const int32_t id = index_.find(text); id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : text) {
        const int32_t id = byte_token_[static_cast<uint8_t>(c)];
        if (id >= 0) out.push_back(id);
      }
    }
  }

  std::vector<float> scores_;
  bool add_space_prefix_ = true;
  TokenIndex index_;
  std::array<int32_t, 256> byte_token_{};
  SpecialSplitter specials_;
  std::vector<std::string> pieces_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(TokenizerVocab v) {
  return SpmTokenizer::create(std::move(v));
}

}  // namespace sieve::tokenizer_detail

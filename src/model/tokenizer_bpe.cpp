// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as GPT-2, SmolLM2 and most HF BPE models
// use it: split special tokens out, pre-tokenize with the regexes the pre-tokenizer names,
// map each piece's bytes to GPT-2's printable codepoints, then apply merges by rank.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <queue>

#include "core/log.h"
#include "model/tokenizer_internal.h"
#include "model/unicode.h"

namespace sieve::tokenizer_detail {

namespace {

// GPT-2's pre-tokenizer regex. \s is spelled out as Unicode White_Space (which includes
// U+0085 NEL, unlike PCRE2's \s): that is the set llama.cpp and HF tokenizers split on. The
// final \s+ (from the original GPT-2 pattern) catches a lone whitespace char before
// non-space, which the other branches leave unmatched.
#define SIEVE_WS \
  "\\t-\\r "     \
  "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr std::string_view kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" SIEVE_WS
                                        "\\p{L}\\p{N}]+"
                                        "|[" SIEVE_WS "]+(?![^" SIEVE_WS "])|[" SIEVE_WS "]+";
// Qwen2's (tokenizer.json's, as llama.cpp runs it): case-insensitive contractions, a letter
// run may take one leading non-letter/non-digit that is not a newline, each digit alone,
// punctuation runs keep their trailing newlines, and newline runs take the spaces before them.
constexpr std::string_view kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^" SIEVE_WS
    "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" SIEVE_WS
    "]*[\\r\\n]+"
    "|[" SIEVE_WS "]+(?![^" SIEVE_WS "])|[" SIEVE_WS "]+";
#undef SIEVE_WS

struct PreTokenizer {
  std::string_view name;
  std::vector<std::string_view> regexes;  // applied in sequence, each splitting the pieces
};

// smollm (shared in llama.cpp with starcoder, refact, command-r, ...): every digit alone,
// then GPT-2. default/gpt2: GPT-2 alone. qwen2: one regex (digits alone inside it).
const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> p = {
      {"smollm", {R"(\p{N})", kGpt2Regex}},
      {"default", {kGpt2Regex}},
      {"gpt2", {kGpt2Regex}},
      {"qwen2", {kQwen2Regex}},
  };
  return p;
}

class Regex {
 public:
  static Result<std::unique_ptr<Regex>> compile(std::string_view pattern) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof(buf));
      return make_error("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern,
                        err_off, reinterpret_cast<const char*>(buf));
    }
    auto r = std::unique_ptr<Regex>(new Regex(code));
    // JIT is an optimisation only: without it (unsupported CPU/build) the interpreter runs.
    if (pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) != 0) {
      log_debug("tokenizer: PCRE2 JIT unavailable for '{}'; using the interpreter", pattern);
    }
    return r;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits each [offset, offset+len) range of `in` (over text) into matches and the gaps
  // between them, appending to `out`. text must be valid UTF-8.
  void split(std::string_view text, const std::vector<std::pair<size_t, size_t>>& in,
             std::vector<std::pair<size_t, size_t>>& out, pcre2_match_data* md) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    for (const auto& [begin, len] : in) {
      const size_t end = begin + len;
      size_t pos = begin;
      size_t emitted = begin;  // text before this has been emitted
      while (pos < end) {
        // Matching over [begin, end) only, with the range's own start as the subject start,
        // so lookarounds cannot see across piece boundaries (as in llama.cpp).
        int rc =
            pcre2_match(code_, subject + begin, len, pos - begin, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(code_, subject + begin, len, pos - begin,
                           PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        }
        if (rc < 0) {
          if (rc != PCRE2_ERROR_NOMATCH) {
            log_warn("tokenizer: regex match failed (code {}); keeping {} bytes as one piece", rc,
                     end - pos);
          }
          break;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = begin + ov[0];
        size_t me = begin + ov[1];
        if (me <= ms) {
          // Empty match (not possible with the patterns above): step one codepoint.
          me = ms + 1;
          while (me < end && (static_cast<uint8_t>(text[me]) & 0xC0) == 0x80) ++me;
          pos = me;
          continue;
        }
        if (ms > emitted) out.emplace_back(emitted, ms - emitted);
        out.emplace_back(ms, me - ms);
        emitted = pos = me;
      }
      if (end > emitted) out.emplace_back(emitted, end - emitted);
    }
  }

 private:
  explicit Regex(pcre2_code* c) : code_(c) {}
  pcre2_code* code_;
};

// Per-thread match data: encode() is const and may run on several threads at once.
struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerVocab v) {
    std::string pre = v.pre.empty() ? "default" : v.pre;
    const PreTokenizer* spec = nullptr;
    std::string supported;
    for (const PreTokenizer& p : pre_tokenizers()) {
      if (p.name == pre) spec = &p;
      supported += fmt::format("{}'{}'", supported.empty() ? "" : ", ", p.name);
    }
    if (!spec) {
      return make_error(
          "tokenizer.ggml.pre '{}' is not a supported pre-tokenizer for byte-level "
          "BPE (supported: {})",
          pre, supported);
    }
    auto t = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
    t->pre_name_ = pre;
    for (std::string_view pattern : spec->regexes) {
      auto r = Regex::compile(pattern);
      if (!r) return r.error();
      t->regexes_.push_back(std::move(*r));
    }
    std::vector<std::string> merges = std::move(v.merges);
    t->init_common(v, /*default_add_bos=*/false);
    t->index_.build(t->tokens_);
    if (auto s = t->build_merges(merges); !s) return s.error();
    t->specials_.build(t->tokens_, t->types_);
    t->build_pieces();
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  std::string_view model_name() const override { return "gpt2"; }

  int32_t find_token(std::string_view text) const override { return index_.find(text); }

  std::vector<int32_t> encode_spans(std::span<const TextSpan> in_spans,
                                    bool add_bos) const override {
    // Regexes need valid UTF-8; llama.cpp likewise reads each invalid byte as U+FFFD.
    std::vector<TextSpan> spans(in_spans.begin(), in_spans.end());
    std::vector<std::string> sanitized(spans.size());
    for (size_t i = 0; i < spans.size(); ++i) {
      if (!utf8_is_valid(spans[i].text)) {
        sanitized[i] = utf8_sanitize(spans[i].text);
        spans[i].text = sanitized[i];
      }
    }
    std::string joined;
    std::vector<Fragment> frags;
    const std::string_view text = specials_.split_spans(spans, joined, frags);
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_bos && add_bos_) out.push_back(bos_);
    thread_local MatchData match_data;
    std::vector<std::pair<size_t, size_t>> a, b;
    Work work;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      a.assign(1, {f.offset, f.length});
      for (const auto& re : regexes_) {
        b.clear();
        re->split(text, a, b, match_data.md);
        a.swap(b);
      }
      for (const auto& [off, len] : a) encode_piece(text.substr(off, len), work, out);
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
      case TokenType::user_defined:
        return tokens_[id];
      case TokenType::unused:
        return {};
      default:
        return pieces_[id];
    }
  }

 private:
  BpeTokenizer() = default;

  struct MergeInfo {
    int32_t rank = -1;
    int32_t result = -1;  // symbol id of left+right
  };
  static uint64_t pair_key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }

  // Symbols are vocabulary ids, extended past n_vocab for merge operands/results that are
  // not tokens themselves (rare, but a merge list may name them; llama.cpp merges by text,
  // so such intermediates must still be able to merge further).
  int32_t symbol_for(std::string_view text) {
    if (const int32_t id = index_.find(text); id >= 0) return id;
    if (const auto it = extra_ids_.find(std::string(text)); it != extra_ids_.end()) {
      return it->second;
    }
    const auto id = static_cast<int32_t>(tokens_.size() + extra_text_.size());
    extra_text_.emplace_back(text);
    extra_ids_.emplace(std::string(text), id);
    return id;
  }

  Status build_merges(const std::vector<std::string>& merges) {
    merges_.reserve(merges.size() * 2);
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos || sp + 1 >= m.size()) {
        return make_error("tokenizer.ggml.merges[{}] = '{}' is not of the form 'left right'", i, m);
      }
      const std::string_view left(m.data(), sp);
      const std::string_view right(m.data() + sp + 1, m.size() - sp - 1);
      const int32_t l = symbol_for(left);
      const int32_t r = symbol_for(right);
      const int32_t res = symbol_for(std::string(left) + std::string(right));
      // The first occurrence of a pair has the lowest rank and is the one that counts.
      merges_.try_emplace(pair_key(l, r), MergeInfo{static_cast<int32_t>(i), res});
    }
    for (int b = 0; b < 256; ++b) byte_symbol_[b] = symbol_for(gpt2_byte_to_utf8(b));
    return {};
  }

  void build_pieces() {
    pieces_.resize(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) pieces_[i] = gpt2_decode_text(tokens_[i]);
  }

  struct Sym {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Bigram {
    int32_t rank;
    int32_t left;   // symbol index
    int32_t right;  // symbol index
    int32_t left_id;
    int32_t right_id;
    // Lowest rank first; ties go to the leftmost pair.
    bool operator<(const Bigram& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  struct Work {
    std::vector<Sym> syms;
    std::vector<Bigram> heap;
  };

  void push_bigram(Work& w, int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return;
    const MergeInfo* m = merges_.find(pair_key(w.syms[left].id, w.syms[right].id));
    if (!m) return;
    w.heap.push_back({m->rank, left, right, w.syms[left].id, w.syms[right].id});
    std::push_heap(w.heap.begin(), w.heap.end());
  }

  void encode_piece(std::string_view piece, Work& w, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (piece.size() == 1) {
      emit(byte_symbol_[static_cast<uint8_t>(piece[0])], out);
      return;
    }
    w.syms.clear();
    w.heap.clear();
    const auto n = static_cast<int32_t>(piece.size());
    for (int32_t i = 0; i < n; ++i) {
      w.syms.push_back(
          {byte_symbol_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1});
    }
    for (int32_t i = 1; i < n; ++i) push_bigram(w, i - 1, i);
    while (!w.heap.empty()) {
      std::pop_heap(w.heap.begin(), w.heap.end());
      const Bigram bg = w.heap.back();
      w.heap.pop_back();
      Sym& l = w.syms[bg.left];
      Sym& r = w.syms[bg.right];
      // Stale entries: a side was merged away (id -1) or grew since the pair was queued.
      if (l.id != bg.left_id || r.id != bg.right_id || l.next != bg.right) continue;
      l.id = merges_.find(pair_key(bg.left_id, bg.right_id))->result;
      l.next = r.next;
      if (r.next >= 0) w.syms[r.next].prev = bg.left;
      r.id = -1;
      push_bigram(w, l.prev, bg.left);
      push_bigram(w, bg.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = w.syms[i].next) emit(w.syms[i].id, out);
  }

  void emit(int32_t sym, std::vector<int32_t>& out) const {
    if (sym < n_vocab()) {
      out.push_back(sym);
      return;
    }
    // A symbol that is not a token: fall back to single-character tokens of its text
    // (llama.cpp does the same; dropping what has no token).
    for (char c : extra_text_[sym - n_vocab()]) {
      if (const int32_t id = index_.find(std::string_view(&c, 1)); id >= 0) out.push_back(id);
    }
  }

  std::string pre_name_;
  std::vector<std::unique_ptr<Regex>> regexes_;
  TokenIndex index_;
  std::vector<std::string> extra_text_;
  std::unordered_map<std::string, int32_t> extra_ids_;
  PairMap<MergeInfo> merges_;
  std::array<int32_t, 256> byte_symbol_{};
  SpecialSplitter specials_;
  std::vector<std::string> pieces_;  // decoded bytes of each token
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(TokenizerVocab v) {
  return BpeTokenizer::create(std::move(v));
}

}  // namespace sieve::tokenizer_detail

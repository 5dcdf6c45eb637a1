// Tokenizer: construction from GGUF metadata, validation, the parts both algorithms share
// (special-token splitting, end-of-generation set, decode).
#include "model/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "gguf/gguf_file.h"
#include "model/tokenizer_internal.h"

namespace sieve {

namespace td = tokenizer_detail;

// ---------------------------------------------------------------------------------------
// Reading the vocabulary out of a GGUF file

namespace {

// A key that is present with the wrong type is an error; an absent key is not.
Error wrong_type(const GgufFile& f, std::string_view key, std::string_view want) {
  const GgufValue* v = f.find(key);
  std::string got = v ? std::string(gguf_value_type_name(v->type)) : "absent";
  if (v && v->type == GgufValueType::ARRAY) {
    got = fmt::format("ARRAY of {}", gguf_value_type_name(v->elem_type));
  }
  return make_error(
      "{}: metadata key '{}' has type {}, expected {} (is the file damaged or "
      "written by an unusual converter?)",
      f.path(), key, got, want);
}

Result<int32_t> read_token_id(const GgufFile& f, std::string_view key) {
  if (!f.find(key)) return int32_t{-1};
  const auto v = f.get_int(key);
  if (!v) return wrong_type(f, key, "an integer");
  // Ids beyond int32 cannot name a token; treat them like "none" is not safe either, so
  // reject and name the key.
  if (*v < -1 || *v > INT32_MAX) {
    return make_error("{}: metadata key '{}' = {} is not a valid token id", f.path(), key, *v);
  }
  return static_cast<int32_t>(*v);
}

Result<std::optional<bool>> read_opt_bool(const GgufFile& f, std::string_view key) {
  if (!f.find(key)) return std::optional<bool>{};
  const auto v = f.get_bool(key);
  if (!v) return wrong_type(f, key, "BOOL");
  return std::optional<bool>{*v};
}

}  // namespace

Result<TokenizerVocab> read_tokenizer_vocab(const GgufFile& f) {
  TokenizerVocab v;
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) {
    if (f.find("tokenizer.ggml.model")) return wrong_type(f, "tokenizer.ggml.model", "STRING");
    return make_error(
        "{}: no tokenizer.ggml.model key; the file carries no tokenizer (it "
        "cannot be used for text generation)",
        f.path());
  }
  v.model = std::string(*model);
  if (f.find("tokenizer.ggml.pre")) {
    const auto pre = f.get_string("tokenizer.ggml.pre");
    if (!pre) return wrong_type(f, "tokenizer.ggml.pre", "STRING");
    v.pre = std::string(*pre);
  }

  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) {
    if (f.find("tokenizer.ggml.tokens")) {
      return wrong_type(f, "tokenizer.ggml.tokens", "ARRAY of STRING");
    }
    return make_error("{}: no tokenizer.ggml.tokens key; the vocabulary is missing", f.path());
  }
  v.tokens.reserve(tokens->size());
  for (std::string_view t : *tokens) v.tokens.emplace_back(t);

  if (f.find("tokenizer.ggml.token_type")) {
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (!types) return wrong_type(f, "tokenizer.ggml.token_type", "ARRAY of INT32");
    v.types.reserve(types->size());
    for (int64_t t : *types) {
      // Unknown type codes are treated as normal text rather than rejected: they only
      // change how a token is split and rendered, never memory safety.
      v.types.push_back(t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::normal);
    }
  }
  if (f.find("tokenizer.ggml.scores")) {
    auto scores = f.get_f32_array("tokenizer.ggml.scores");
    if (!scores) return wrong_type(f, "tokenizer.ggml.scores", "ARRAY of FLOAT32");
    v.scores = std::move(*scores);
  }
  if (f.find("tokenizer.ggml.merges")) {
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges) return wrong_type(f, "tokenizer.ggml.merges", "ARRAY of STRING");
    v.merges.reserve(merges->size());
    for (std::string_view m : *merges) v.merges.emplace_back(m);
  }

  struct IdKey {
    const char* key;
    int32_t* dst;
  };
  const IdKey ids[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},     {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},     {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk}, {"tokenizer.ggml.padding_token_id", &v.pad},
  };
  for (const IdKey& k : ids) {
    auto r = read_token_id(f, k.key);
    if (!r) return r.error();
    *k.dst = *r;
  }

  struct BoolKey {
    const char* key;
    std::optional<bool>* dst;
  };
  const BoolKey bools[] = {
      {"tokenizer.ggml.add_bos_token", &v.add_bos},
      {"tokenizer.ggml.add_eos_token", &v.add_eos},
      {"tokenizer.ggml.add_space_prefix", &v.add_space_prefix},
  };
  for (const BoolKey& k : bools) {
    auto r = read_opt_bool(f, k.key);
    if (!r) return r.error();
    *k.dst = *r;
  }

  if (f.find("tokenizer.chat_template")) {
    const auto t = f.get_string("tokenizer.chat_template");
    if (!t) return wrong_type(f, "tokenizer.chat_template", "STRING");
    v.chat_template = std::string(*t);
  }
  return v;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
  auto v = read_tokenizer_vocab(f);
  if (!v) return v.error();
  auto t = from_vocab(std::move(*v));
  if (!t) return make_error("{}: {}", f.path(), t.message());
  return t;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(TokenizerVocab v) {
  const size_t n = v.tokens.size();
  if (n == 0) return make_error("tokenizer.ggml.tokens is empty; the vocabulary is missing");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return make_error("tokenizer.ggml.tokens has {} entries, more than token ids can address", n);
  }
  if (!v.types.empty() && v.types.size() != n) {
    return make_error(
        "tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has "
        "{}; they must match one to one",
        v.types.size(), n);
  }
  if (v.types.empty()) v.types.assign(n, TokenType::normal);
  struct NamedId {
    const char* key;
    int32_t* id;
  };
  const NamedId ids[] = {{"bos_token_id", &v.bos},     {"eos_token_id", &v.eos},
                         {"eot_token_id", &v.eot},     {"eom_token_id", &v.eom},
                         {"unknown_token_id", &v.unk}, {"padding_token_id", &v.pad}};
  for (const NamedId& k : ids) {
    if (*k.id < -1 || *k.id >= static_cast<int64_t>(n)) {
      return make_error("tokenizer.ggml.{} = {} is outside the vocabulary of {} tokens", k.key,
                        *k.id, n);
    }
  }
  if (v.model == "gpt2") return td::make_bpe_tokenizer(std::move(v));
  if (v.model == "llama") {
    if (v.scores.size() != n) {
      return make_error(
          "tokenizer.ggml.scores has {} entries but the vocabulary has {}; a "
          "SentencePiece (\"llama\") tokenizer needs one score per token",
          v.scores.size(), n);
    }
    return td::make_spm_tokenizer(std::move(v));
  }
  return make_error(
      "tokenizer.ggml.model '{}' is not supported (supported: 'gpt2' = "
      "byte-level BPE, 'llama' = SentencePiece BPE)",
      v.model);
}

// ---------------------------------------------------------------------------------------
// Shared behaviour

void Tokenizer::init_common(TokenizerVocab& v, bool default_add_bos) {
  tokens_ = std::move(v.tokens);
  types_ = std::move(v.types);
  bos_ = v.bos;
  eos_ = v.eos;
  eot_ = v.eot;
  add_bos_ = v.add_bos.value_or(default_add_bos) && bos_ >= 0;
  add_eos_ = v.add_eos.value_or(false) && eos_ >= 0;
  chat_template_ = std::move(v.chat_template);

  // End of generation: what the metadata names, plus the end-of-turn tokens chat models
  // emit by convention (llama.cpp recognises the same texts, since converters often do
  // not write eot_token_id).
  static constexpr std::string_view kEogTexts[] = {
      "<|im_end|>", "<|endoftext|>",   "<end_of_turn>", "<|eot_id|>",         "<|eom_id|>",
      "<|end|>",    "<|end_of_text|>", "<EOT>",         "<end_of_utterance>", "<|return|>",
  };
  for (int32_t id : {v.eos, v.eot, v.eom}) {
    if (id >= 0) eog_ids_.push_back(id);
  }
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const std::string& t = tokens_[id];
    if (t.size() < 5 || t.size() > 20 || t[0] != '<') continue;
    for (std::string_view e : kEogTexts) {
      if (t != e) continue;
      eog_ids_.push_back(id);
      // A stop token typed as plain text is a converter slip; llama.cpp makes it a
      // control token (so chat prompts can contain it), and so do we.
      if (types_[id] == TokenType::normal) types_[id] = TokenType::control;
    }
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  return valid_id(id) ? types_[id] : TokenType::undefined;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  // add_space_prefix put a space before the first word; the first non-empty piece gives it
  // back (so decode(encode(s)) == s for those models too).
  bool strip = strip_leading_space_;
  for (const int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (strip && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Special-token splitting

namespace tokenizer_detail {

uint64_t TokenIndex::hash(std::string_view s) {
  // Multiply-mix over 8-byte words; token texts are short, so this stays a few cycles.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
  uint64_t h = 0xcbf29ce484222325ULL ^ (s.size() * kMul);
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    h = (h ^ k) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t k = 0;
    std::memcpy(&k, p, n);
    h = (h ^ k) * kMul;
  }
  h ^= h >> 32;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 29;
  return h;
}

void TokenIndex::build(const std::vector<std::string>& tokens) {
  tokens_ = &tokens;
  size_t cap = 16;
  while (cap < tokens.size() * 2) cap <<= 1;
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const uint64_t h = hash(tokens[id]);
    const uint64_t tag = h >> 32;
    size_t i = h & mask_;
    while (slots_[i] != 0) {
      const auto other = static_cast<size_t>((slots_[i] & 0xFFFFFFFFu) - 1);
      if ((slots_[i] >> 32) == tag && tokens[other] == tokens[id]) break;  // duplicate text
      i = (i + 1) & mask_;
    }
    slots_[i] = (tag << 32) | (id + 1);
  }
}

int32_t TokenIndex::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash(text);
  const uint64_t tag = h >> 32;
  size_t i = h & mask_;
  while (slots_[i] != 0) {
    if ((slots_[i] >> 32) == tag) {
      const auto id = static_cast<int32_t>((slots_[i] & 0xFFFFFFFFu) - 1);
      if ((*tokens_)[id] == text) return id;
    }
    i = (i + 1) & mask_;
  }
  return -1;
}

int32_t SpecialSplitter::child(int32_t node, uint8_t b) const {
  if (node == 0) return root_children_[b];
  const Node& n = nodes_[node];
  for (uint32_t e = n.first_edge; e < n.first_edge + n.n_edges; ++e) {
    if (edges_[e].byte == b) return edges_[e].child;
  }
  return -1;
}

void SpecialSplitter::build(const std::vector<std::string>& tokens,
                            const std::vector<TokenType>& types) {
  tokens_ = &tokens;
  by_rank_.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenType t = types[i];
    if ((t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) &&
        !tokens[i].empty()) {
      by_rank_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(by_rank_.begin(), by_rank_.end(),
                   [&](int32_t a, int32_t b) { return tokens[a].size() > tokens[b].size(); });

  // Build with per-node maps, then flatten into contiguous edge runs.
  std::vector<std::map<uint8_t, int32_t>> kids(1);
  std::vector<Node> nodes(1);
  for (size_t r = 0; r < by_rank_.size(); ++r) {
    const int32_t id = by_rank_[r];
    int32_t node = 0;
    for (char c : tokens[id]) {
      const auto b = static_cast<uint8_t>(c);
      auto it = kids[node].find(b);
      if (it == kids[node].end()) {
        const auto next = static_cast<int32_t>(nodes.size());
        kids[node].emplace(b, next);
        kids.emplace_back();
        nodes.emplace_back();
        node = next;
      } else {
        node = it->second;
      }
    }
    // Duplicate texts: the later id wins, as in a text -> id map.
    if (nodes[node].rank < 0 || by_rank_[nodes[node].rank] < id) {
      nodes[node].rank = static_cast<int32_t>(r);
      nodes[node].always = types[id] == TokenType::user_defined;
    }
  }
  root_children_.fill(-1);
  for (const auto& [b, c] : kids[0]) root_children_[b] = c;
  edges_.clear();
  for (size_t n = 1; n < nodes.size(); ++n) {
    nodes[n].first_edge = static_cast<uint32_t>(edges_.size());
    nodes[n].n_edges = static_cast<uint32_t>(kids[n].size());
    for (const auto& [b, c] : kids[n]) edges_.push_back({b, c});
  }
  nodes_ = std::move(nodes);
}

void SpecialSplitter::split(std::string_view text, bool parse_special,
                            std::vector<Fragment>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({-1, 0, text.size()});
  if (by_rank_.empty()) return;

  // Which special tokens occur at all (a token that is only a part of a longer match may
  // still be needed, so every match counts).
  std::vector<uint8_t> seen(by_rank_.size(), 0);
  std::vector<int32_t> ranks;
  for (size_t p = 0; p < text.size(); ++p) {
    int32_t node = root_children_[static_cast<uint8_t>(text[p])];
    size_t q = p + 1;
    while (node >= 0) {
      const Node& nd = nodes_[node];
      if (nd.rank >= 0 && !seen[nd.rank] && (parse_special || nd.always)) {
        seen[nd.rank] = 1;
        ranks.push_back(nd.rank);
      }
      if (q >= text.size()) break;
      node = child(node, static_cast<uint8_t>(text[q++]));
    }
  }
  if (ranks.empty()) return;
  std::sort(ranks.begin(), ranks.end());

  std::vector<Fragment> next;
  for (const int32_t r : ranks) {
    const int32_t id = by_rank_[r];
    const std::string_view tok = (*tokens_)[id];
    next.clear();
    for (const Fragment& f : out) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset;
      const size_t end = f.offset + f.length;
      const std::string_view window = text.substr(0, end);
      while (base < end) {
        const size_t m = window.find(tok, base);
        if (m == std::string_view::npos) break;
        if (m > base) next.push_back({-1, base, m - base});
        next.push_back({id, m, tok.size()});
        base = m + tok.size();
      }
      if (base < end) next.push_back({-1, base, end - base});
    }
    out.swap(next);
  }
}

std::string_view SpecialSplitter::split_spans(std::span<const TextSpan> spans, std::string& joined,
                                              std::vector<Fragment>& out) const {
  out.clear();
  if (spans.size() == 1) {
    split(spans[0].text, spans[0].parse_special, out);
    return spans[0].text;
  }
  joined.clear();
  for (const TextSpan& s : spans) joined += s.text;
  std::vector<Fragment> part;
  size_t base = 0;
  for (const TextSpan& s : spans) {
    split(s.text, s.parse_special, part);
    for (Fragment f : part) {
      f.offset += base;
      if (f.token < 0 && !out.empty() && out.back().token < 0 &&
          out.back().offset + out.back().length == f.offset) {
        out.back().length += f.length;
      } else {
        out.push_back(f);
      }
    }
    base += s.text.size();
  }
  return joined;
}

}  // namespace tokenizer_detail

}  // namespace sieve

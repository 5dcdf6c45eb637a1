#include "sparse/policy.h"

#include "core/text_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

namespace sieve {
namespace {

constexpr std::string_view k_presets[] = {"auto",       "dense",       "streaming", "quest",
                                          "h2o",        "tokenselect", "sketch",    "stca",
                                          "uniprefill", "rtpurbo"};

// The auto policy's sparse preset, chosen from bench/RESULTS.md (issue 6 measurements).
constexpr std::string_view k_auto_preset = "tokenselect";

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

constexpr EnumName<ScorerKind> k_scorers[] = {
    {ScorerKind::all, "all"},       {ScorerKind::none, "none"},   {ScorerKind::exact, "exact"},
    {ScorerKind::sketch, "sketch"}, {ScorerKind::quest, "quest"}, {ScorerKind::indexer, "indexer"}};
constexpr EnumName<AggregationKind> k_aggs[] = {{AggregationKind::soft_vote, "soft_vote"},
                                                {AggregationKind::hard_vote, "hard_vote"},
                                                {AggregationKind::raw_sum, "raw_sum"}};
constexpr EnumName<VoteScope> k_scopes[] = {{VoteScope::layer, "layer"},
                                            {VoteScope::group, "group"}};
constexpr EnumName<MemoryKind> k_memories[] = {
    {MemoryKind::keep, "keep"}, {MemoryKind::evict_h2o, "h2o"}, {MemoryKind::evict_stca, "stca"}};
constexpr EnumName<PositionMode> k_positions[] = {{PositionMode::auto_, "auto"},
                                                  {PositionMode::original, "original"},
                                                  {PositionMode::compact, "compact"}};
constexpr EnumName<KeepRows> k_keep_rows[] = {
    {KeepRows::auto_, "auto"}, {KeepRows::on, "true"}, {KeepRows::off, "false"}};
constexpr EnumName<ScorePositions> k_score_positions[] = {{ScorePositions::auto_, "auto"},
                                                          {ScorePositions::original, "original"},
                                                          {ScorePositions::none, "none"}};
constexpr EnumName<PrefillMode> k_prefills[] = {{PrefillMode::dense, "dense"},
                                                {PrefillMode::chunk, "chunk"},
                                                {PrefillMode::uniprefill, "uniprefill"}};

template <class E, size_t N>
std::string_view enum_name(const EnumName<E> (&table)[N], E v) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return "?";
}

template <class E, size_t N>
Status parse_enum(const EnumName<E> (&table)[N], std::string_view key, std::string_view value,
                  E& out) {
  std::string valid;
  for (const auto& e : table) {
    if (e.name == value) {
      out = e.value;
      return {};
    }
    valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  }
  return make_error("policy knob {}: '{}' is not one of {}", key, value, valid);
}

Status parse_int(std::string_view key, std::string_view value, int64_t lo, int64_t hi,
                 int32_t& out) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
    return make_error("policy knob {}: '{}' is not an integer (expected {}..{})", key, value, lo,
                      hi);
  }
  if (v < lo || v > hi) return make_error("policy knob {}: {} is outside {}..{}", key, v, lo, hi);
  out = static_cast<int32_t>(v);
  return {};
}

Status parse_float(std::string_view key, std::string_view value, double lo, double hi, float& out) {
  std::string s(value);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return make_error("policy knob {}: '{}' is not a number (expected {}..{})", key, value, lo, hi);
  }
  if (v < lo || v > hi) return make_error("policy knob {}: {} is outside {}..{}", key, v, lo, hi);
  out = static_cast<float>(v);
  return {};
}

Status parse_bool(std::string_view key, std::string_view value, bool& out) {
  if (value == "1" || value == "true" || value == "on" || value == "yes") {
    out = true;
  } else if (value == "0" || value == "false" || value == "off" || value == "no") {
    out = false;
  } else {
    return make_error("policy knob {}: '{}' is not a boolean (true/false, on/off, 1/0)", key,
                      value);
  }
  return {};
}

// A knob naming a file read once (head plan, sketch basis): "" clears it; the file's errors
// are the knob's.
template <class T, class Load>
Status set_file_knob(std::string_view key, std::string_view value, std::string& path,
                     std::shared_ptr<const T>& loaded, Load load) {
  if (value.empty()) {
    path.clear();
    loaded.reset();
    return {};
  }
  Result<T> r = load(std::string(value));
  if (!r) return make_error("policy knob {}: {}", key, r.message());
  path = std::string(value);
  loaded = std::make_shared<const T>(std::move(r.value()));
  return {};
}

// "auto" (empty) or ascending, distinct layer indices "7,11,15".
Status parse_layer_list(std::string_view key, std::string_view value, std::vector<int32_t>& out) {
  std::vector<int32_t> layers;
  if (value != "auto") {
    size_t b = 0;
    while (b <= value.size()) {
      const size_t e = std::min(value.find(',', b), value.size());
      std::string_view item = value.substr(b, e - b);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      int32_t l = 0;
      Status st = parse_int(key, item, 0, 4095, l);
      if (!st.ok()) {
        return make_error(
            "policy knob {}: '{}' is not 'auto' or a comma-separated list of layer indices", key,
            value);
      }
      if (!layers.empty() && l <= layers.back()) {
        return make_error("policy knob {}: layers must ascend without repeats ('{}')", key, value);
      }
      layers.push_back(l);
      b = e + 1;
    }
  }
  out = std::move(layers);
  return {};
}

std::string layer_list_text(const std::vector<int32_t>& layers) {
  if (layers.empty()) return "auto";
  std::string s;
  for (int32_t l :
       layers) {  // appended in two steps: GCC 12's -Wrestrict misfires on "," + to_string
    if (!s.empty()) s += ',';
    s += std::to_string(l);
  }
  return s;
}

struct Knob {
  KnobInfo info;
  std::function<Status(PolicyConfig&, std::string_view key, std::string_view)> set;
  std::function<std::string(const PolicyConfig&)> get;
};

constexpr int64_t k_max_tokens = int64_t{1} << 30;

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = {
      {{"scorer",
        "how tokens are ranked: all (dense), none (sinks + window), exact, sketch, quest, indexer "
        "(RTPurbo head plan)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_enum(k_scorers, k, v, p.scorer); },
       [](const PolicyConfig& p) { return std::string(enum_name(k_scorers, p.scorer)); }},
      {{"aggregation", "how heads combine scores: soft_vote, hard_vote, raw_sum"},
       [](PolicyConfig& p, auto k, auto v) { return parse_enum(k_aggs, k, v, p.aggregation); },
       [](const PolicyConfig& p) { return std::string(enum_name(k_aggs, p.aggregation)); }},
      {{"scope",
        "heads sharing one selection: layer (public TokenSelect code) or group (per KV head)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_enum(k_scopes, k, v, p.scope); },
       [](const PolicyConfig& p) { return std::string(enum_name(k_scopes, p.scope)); }},
      {{"memory", "KV memory action: keep, h2o (accumulated-score eviction), stca (mass eviction)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_enum(k_memories, k, v, p.memory); },
       [](const PolicyConfig& p) { return std::string(enum_name(k_memories, p.memory)); }},
      {{"positions", "auto (compact beyond the trained context), original, compact"},
       [](PolicyConfig& p, auto k, auto v) { return parse_enum(k_positions, k, v, p.positions); },
       [](const PolicyConfig& p) { return std::string(enum_name(k_positions, p.positions)); }},
      {{"score_positions",
        "exact scorer's positions: original (RoPE distances), none (pre-RoPE, as TokenSelect's "
        "code), auto (none under compact positions)"},
       [](PolicyConfig& p, auto k, auto v) {
         return parse_enum(k_score_positions, k, v, p.score_positions);
       },
       [](const PolicyConfig& p) {
         return std::string(enum_name(k_score_positions, p.score_positions));
       }},
      {{"prefill",
        "prefill: dense, chunk (one selection per chunk's mean query), uniprefill (token "
        "dropping)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_enum(k_prefills, k, v, p.prefill); },
       [](const PolicyConfig& p) { return std::string(enum_name(k_prefills, p.prefill)); }},
      {{"prefill_tail",
        "prefill=chunk: chunks reaching into the prompt's last N tokens prefill densely (0: none; "
        "not under compact positions)"},
       [](PolicyConfig& p, auto k, auto v) {
         return parse_int(k, v, 0, k_max_tokens, p.prefill_tail);
       },
       [](const PolicyConfig& p) { return std::to_string(p.prefill_tail); }},
      {{"top_k", "selected tokens besides sinks and window (0: none; a cap under top_p)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, k_max_tokens, p.top_k); },
       [](const PolicyConfig& p) { return std::to_string(p.top_k); }},
      {{"top_p", "select the smallest set reaching this score mass (0: off, use top_k)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, 0.0, 1.0, p.top_p); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.top_p); }},
      {{"min_keep", "floor on the selected set under top_p"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, k_max_tokens, p.min_keep); },
       [](const PolicyConfig& p) { return std::to_string(p.min_keep); }},
      {{"sinks", "first tokens always read (and never evicted)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, k_max_tokens, p.sinks); },
       [](const PolicyConfig& p) { return std::to_string(p.sinks); }},
      {{"local", "most recent tokens always read (and never evicted)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, k_max_tokens, p.local); },
       [](const PolicyConfig& p) { return std::to_string(p.local); }},
      {{"block", "selection granularity in tokens (1 = token level; quest: page size)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 1, 4096, p.block); },
       [](const PolicyConfig& p) { return std::to_string(p.block); }},
      {{"pool_kernel", "max-pool smoothing width over neighbouring token scores (0 = off)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, 1024, p.pool_kernel); },
       [](const PolicyConfig& p) { return std::to_string(p.pool_kernel); }},
      {{"raw_logits", "score softmax without the 1/sqrt(d) scale (as TokenSelect's public code)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_bool(k, v, p.raw_logits); },
       [](const PolicyConfig& p) { return std::string(p.raw_logits ? "true" : "false"); }},
      {{"theta", "selection cache: reuse the last selection while cos(query, cached) >= theta"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, -1.0, 1.0, p.theta); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.theta); }},
      {{"compact_theta",
        "selection cache threshold while compact positions are in effect (0: theta)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, 0.0, 1.0, p.compact_theta); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.compact_theta); }},
      {{"selection_cache", "reuse selections across decode steps (true/false)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_bool(k, v, p.selection_cache); },
       [](const PolicyConfig& p) { return std::string(p.selection_cache ? "true" : "false"); }},
      {{"keep_rows",
        "while a selection is reused, read its K/V rows from a contiguous f16 copy its selecting "
        "step wrote: true, false, auto (while compact positions are in effect); holds sinks + "
        "top_k rows per layer and KV head"},
       [](PolicyConfig& p, auto k, auto v) { return parse_enum(k_keep_rows, k, v, p.keep_rows); },
       [](const PolicyConfig& p) { return std::string(enum_name(k_keep_rows, p.keep_rows)); }},
      {{"sketch_dim", "sketch dimensions d_s (0 = head_dim / 8)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, 1024, p.sketch_dim); },
       [](const PolicyConfig& p) { return std::to_string(p.sketch_dim); }},
      {{"sketch_basis",
        "sketch: PCA basis JSON from `sieve calibrate -m MODEL --sketch-basis --out basis.json` "
        "(empty: random projection)"},
       [](PolicyConfig& p, auto k, auto v) {
         return set_file_knob(k, v, p.sketch_basis, p.basis, load_sketch_basis);
       },
       [](const PolicyConfig& p) { return p.sketch_basis; }},
      {{"sketch_shared", "one sketch projection for all heads (true) or one per KV head (false)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_bool(k, v, p.sketch_shared); },
       [](const PolicyConfig& p) { return std::string(p.sketch_shared ? "true" : "false"); }},
      {{"seed", "seed of the random sketch projection"},
       [](PolicyConfig& p, auto k, auto v) -> Status {
         int32_t s = 0;
         SIEVE_TRY(parse_int(k, v, 0, INT32_MAX, s));
         p.seed = static_cast<uint64_t>(s);
         return {};
       },
       [](const PolicyConfig& p) { return std::to_string(p.seed); }},
      {{"kv_budget", "eviction: tokens per layer a sequence may hold before eviction runs"},
       [](PolicyConfig& p, auto k, auto v) {
         return parse_int(k, v, 1, k_max_tokens, p.kv_budget);
       },
       [](const PolicyConfig& p) { return std::to_string(p.kv_budget); }},
      {{"keep_mass", "stca: importance mass p the kept tokens must reach"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, 0.0, 1.0, p.keep_mass); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.keep_mass); }},
      {{"decay", "importance decay per step (1 = plain accumulation)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, 0.0, 1.0, p.decay); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.decay); }},
      {{"evict_floor", "stca: tokens kept at least, besides sinks and window"},
       [](PolicyConfig& p, auto k, auto v) {
         return parse_int(k, v, 0, k_max_tokens, p.evict_floor);
       },
       [](const PolicyConfig& p) { return std::to_string(p.evict_floor); }},
      {{"min_context", "context length below which attention is dense (0 = sinks + top_k + local)"},
       [](PolicyConfig& p, auto k, auto v) {
         return parse_int(k, v, 0, k_max_tokens, p.min_context);
       },
       [](const PolicyConfig& p) { return std::to_string(p.min_context); }},
      {{"up_layers",
        "uniprefill: selection layers, comma-separated (auto: every full-attention layer of a "
        "hybrid but 0, else from 15/32 of the depth every 1/8)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_layer_list(k, v, p.up_layers); },
       [](const PolicyConfig& p) { return layer_list_text(p.up_layers); }},
      {{"up_queries", "uniprefill: last prompt tokens whose attention rates every token (n)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 1, 65536, p.up_queries); },
       [](const PolicyConfig& p) { return std::to_string(p.up_queries); }},
      {{"up_block", "uniprefill: tokens per kept-or-dropped block (G)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 1, 65536, p.up_block); },
       [](const PolicyConfig& p) { return std::to_string(p.up_block); }},
      {{"up_p", "uniprefill: kept blocks are the smallest set reaching this importance mass"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, 0.0, 1.0, p.up_p); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.up_p); }},
      {{"up_sinks", "uniprefill: first positions always kept"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, k_max_tokens, p.up_sinks); },
       [](const PolicyConfig& p) { return std::to_string(p.up_sinks); }},
      {{"up_tail", "uniprefill: last tokens of the prompt chunk always kept (at least 1)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 1, k_max_tokens, p.up_tail); },
       [](const PolicyConfig& p) { return std::to_string(p.up_tail); }},
      {{"up_min_prompt", "uniprefill: prompts shorter than this are prefilled densely"},
       [](PolicyConfig& p, auto k, auto v) {
         return parse_int(k, v, 0, k_max_tokens, p.up_min_prompt);
       },
       [](const PolicyConfig& p) { return std::to_string(p.up_min_prompt); }},
      {{"up_chunk",
        "uniprefill: prefill chunk; longer prompts select per chunk among its own tokens"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 1, k_max_tokens, p.up_chunk); },
       [](const PolicyConfig& p) { return std::to_string(p.up_chunk); }},
      {{"head_plan",
        "rtpurbo: head plan JSON from `sieve calibrate -m MODEL --out heads.json` (--fit-indexer "
        "for the decode indexer)"},
       [](PolicyConfig& p, auto k, auto v) {
         return set_file_knob(k, v, p.head_plan, p.plan,
                              [](const std::string& f) { return load_head_plan(f); });
       },
       [](const PolicyConfig& p) { return p.head_plan; }},
      {{"rt_sinks", "rtpurbo: first tokens every head reads (local heads: sinks + window)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_int(k, v, 0, k_max_tokens, p.rt_sinks); },
       [](const PolicyConfig& p) { return std::to_string(p.rt_sinks); }},
      {{"rt_window",
        "rtpurbo: local heads' sliding window in tokens (0 = the model's trained context / 4: "
        "SmolLM2 2048, Gemma 3 8192)"},
       [](PolicyConfig& p, auto k, auto v) {
         return parse_int(k, v, 0, k_max_tokens, p.rt_window);
       },
       [](const PolicyConfig& p) { return std::to_string(p.rt_window); }},
      {{"rt_gain",
        "rtpurbo: the indexer's logits are multiplied by this before top-p (1 = the fit as it is; "
        "> 1 keeps fewer tokens)"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, 0.01, 1000.0, p.rt_gain); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.rt_gain); }},
      {{"rt_refine",
        "rtpurbo: 0 = off; p in (0, 1]: the indexer's picks are scored exactly (q.K) and cut to "
        "the fewest whose attention mass, with the sinks and window counted, reaches p"},
       [](PolicyConfig& p, auto k, auto v) { return parse_float(k, v, 0.0, 1.0, p.rt_refine); },
       [](const PolicyConfig& p) { return fmt::format("{:g}", p.rt_refine); }},
  };
  return table;
}

std::string valid_presets() {
  std::string s;
  for (std::string_view p : k_presets) s += (s.empty() ? "" : ", ") + std::string(p);
  return s;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

Status check_consistency(const PolicyConfig& p) {
  if (p.memory != MemoryKind::keep && p.kv_budget < p.sinks + p.local + 1) {
    return make_error("policy knob kv_budget: {} must exceed sinks + local ({} + {})", p.kv_budget,
                      p.sinks, p.local);
  }
  if (p.scorer == ScorerKind::quest && p.block < 2) {
    return make_error("policy knob block: quest ranks blocks; set block >= 2 (e.g. block=16)");
  }
  return {};
}

}  // namespace

int32_t PolicyConfig::threshold() const {
  if (min_context > 0) return min_context;
  const int64_t t = int64_t{sinks} + top_k + local;
  return static_cast<int32_t>(std::min<int64_t>(t, INT32_MAX));
}

std::string PolicyConfig::describe() const {
  const PolicyConfig base = *make_policy(preset);
  std::string s = preset;
  for (const Knob& k : knobs()) {
    const std::string v = k.get(*this);
    if (v != k.get(base)) s += fmt::format(" {}={}", k.info.name, v);
  }
  return s;
}

std::span<const std::string_view> policy_presets() {
  return k_presets;
}

std::string_view auto_sparse_preset() {
  return k_auto_preset;
}

std::span<const KnobInfo> policy_knobs() {
  static const std::vector<KnobInfo> infos = [] {
    std::vector<KnobInfo> v;
    for (const Knob& k : knobs()) v.push_back(k.info);
    return v;
  }();
  return infos;
}

Result<PolicyConfig> make_policy(std::string_view preset) {
  PolicyConfig p;
  p.preset = std::string(preset);
  if (preset == "dense") {
    p.scorer = ScorerKind::all;
  } else if (preset == "streaming") {
    // StreamingLLM: attention sinks + a recent window, at the same token budget as tokenselect.
    p.scorer = ScorerKind::none;
    p.top_k = 0;
    p.local = 2048 + 512;
  } else if (preset == "quest") {
    // Quest: per-block min/max key bound, top blocks; per KV head as in the paper.
    p.scorer = ScorerKind::quest;
    p.block = 16;
    p.scope = VoteScope::group;
    p.aggregation = AggregationKind::raw_sum;
    p.selection_cache = false;
    p.prefill = PrefillMode::chunk;
  } else if (preset == "h2o") {
    // H2O: accumulated attention picks heavy hitters; the rest is evicted.
    p.scorer = ScorerKind::exact;
    p.memory = MemoryKind::evict_h2o;
    p.kv_budget = 128 + 2048 + 512;
    p.decay = 1.0f;
    p.selection_cache = false;
  } else if (preset == "tokenselect" || preset == "auto") {
    p.scorer = ScorerKind::exact;
    // auto: chunk prefill with the chunks in the prompt's last 1024 tokens dense. Every chunk
    // selecting (the paper) lost 5.9 points at 8K on SmolLM2 and 13.8 at 32K on Gemma 3; with
    // the dense tail +2.5 and +3.3 (Gemma 8K -2.4), and the CPU prefill at 16K is 1.8-2.15x that
    // of a dense prefill (bench/RESULTS.md, "TokenSelect chunk prefill with a dense tail"). The
    // CUDA backend prefills auto densely below 64K prompt tokens (its sparse chunk is slower
    // there). auto also reuses selections down to cosine 0.7 instead of the paper's 0.9: on
    // 16 CPU threads decode goes from 0.84-0.97x / 1.15-1.20x of dense to 2.08x / 2.71x at 16K /
    // 32K, and the six-task suite moves -0.7..+0.2 points on SmolLM2 (4K, 8K; n = 20) and -0.9 /
    // -2.1 on Gemma 3 (16K, 32K; n = 10) against theta 0.9 (bench/RESULTS.md, "auto's theta"). Past
    // the trained window (compact positions) the tail runs selecting too, and selection scores are
    // pre-RoPE (score_positions=auto, as TokenSelect's public code always scores): scored at their
    // original positions, far keys sit at distances the model never trained on, and SmolLM2's
    // niah_single_1 fell to 1/4 at 32K (theta 0.9) and 12/16 at 16K (theta 0.7); pre-RoPE, 12/12 at
    // 32K and 16/16 at 16K with theta 0.7 ("Retrieval beyond the trained window", "Pre-RoPE
    // selection scores").
    p.prefill = PrefillMode::chunk;
    if (preset == "auto") {
      p.prefill_tail = 1024;
      p.theta = 0.7f;
    }
    p.positions = PositionMode::auto_;
    p.score_positions = ScorePositions::auto_;
  } else if (preset == "sketch" || preset == "stca") {
    // SequenceO1 scores every step; both presets reuse selections as auto does (TokenSelect's
    // cache at theta 0.7): on the six-task suite at 4K on SmolLM2 sketch scores 44.4 at theta
    // 0.9 and 0.7, stca 40.0 scoring every step and 45.6 reusing at 0.9 or 0.7; at 32K sketch
    // and stca decode 4.66x / 5.17x dense on 16 CPU threads (auto 3.76x), at 16K 3.13x / 3.62x
    // on 2 (auto 2.83x). A reused stca selection adds its votes to the importance again
    // (bench/RESULTS.md, "Sketch and stca reuse selections").
    p.scorer = ScorerKind::sketch;
    p.prefill = PrefillMode::chunk;
    p.theta = 0.7f;
    p.positions = PositionMode::auto_;
    if (preset == "stca") {
      p.memory = MemoryKind::evict_stca;
      p.positions = PositionMode::original;  // kept tokens stay in original order and positions
      p.kv_budget = 4096;
    }
  } else if (preset == "uniprefill") {
    // UniPrefill: prompt tokens dropped at selection layers; decode attends densely to what
    // each layer kept (combine with a decode policy: --policy tokenselect --set
    // prefill=uniprefill).
    p.scorer = ScorerKind::all;
    p.prefill = PrefillMode::uniprefill;
  } else if (preset == "rtpurbo") {
    // RTPurbo: local heads read sinks + a window, retrieval heads the indexer's top-p tokens
    // (capped by top_k) plus sinks + window at decode; retrieval heads prefill densely.
    p.scorer = ScorerKind::indexer;
    p.top_p = 0.95f;
    p.top_k = 4096;
    p.min_keep = 16;
    p.selection_cache = false;
  } else {
    return make_error("unknown attention policy '{}'; policies: {}", preset, valid_presets());
  }
  return p;
}

Status set_policy_knob(PolicyConfig& p, std::string_view key, std::string_view value) {
  if (key == "policy" || key == "preset") {
    return make_error("'{}' names the preset; give it first (--policy NAME), then the knobs", key);
  }
  for (const Knob& k : knobs()) {
    if (k.info.name == key) {
      SIEVE_TRY(k.set(p, key, trim(value)));
      return check_consistency(p);
    }
  }
  std::string valid;
  for (const Knob& k : knobs()) valid += (valid.empty() ? "" : ", ") + std::string(k.info.name);
  return make_error("unknown policy knob '{}'; knobs: {}", key, valid);
}

Status set_policy_knob(PolicyConfig& p, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    return make_error("policy setting '{}' is not key=value (e.g. --set top_k=1024)", assignment);
  }
  return set_policy_knob(p, trim(assignment.substr(0, eq)), trim(assignment.substr(eq + 1)));
}

Result<PolicyConfig> make_policy(std::string_view preset,
                                 std::span<const std::string> assignments) {
  Result<PolicyConfig> p = make_policy(preset);
  if (!p) return p;
  for (const std::string& a : assignments) {
    SIEVE_TRY(set_policy_knob(*p, a));
  }
  SIEVE_TRY(check_policy_complete(*p));
  return p;
}

PolicyItem split_policy_item(std::string_view item) {
  PolicyItem out;
  size_t at = item.find(':');
  out.name = std::string(item.substr(0, at));
  while (at != std::string_view::npos) {
    const size_t next = item.find(':', at + 1);
    out.assignments.emplace_back(
        item.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    at = next;
  }
  return out;
}

Status check_policy_complete(const PolicyConfig& p) {
  if (p.uses_head_plan() && !p.plan) {
    return make_error(
        "policy {} needs a head plan: write one with `sieve calibrate -m MODEL --out heads.json` "
        "(add "
        "--fit-indexer for the retrieval heads' decode indexer), then pass --head-plan heads.json "
        "(or --set head_plan=heads.json)",
        p.preset);
  }
  return {};
}

bool policy_knob_text(const nlohmann::json& v, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_boolean()) {
    out = v.get<bool>() ? "true" : "false";
  } else if (v.is_number_integer()) {
    out = std::to_string(v.get<int64_t>());
  } else if (v.is_number()) {
    out = fmt::format("{:.17g}", v.get<double>());
  } else if (v.is_array()) {  // a list knob (up_layers): [7, 11, 15]
    out.clear();
    for (const auto& e : v) {
      if (!e.is_number_integer()) return false;
      if (!out.empty()) out += ',';
      out += std::to_string(e.get<int64_t>());
    }
  } else {
    return false;
  }
  return true;
}

namespace {

Result<PolicyConfig> policy_from_json(const nlohmann::json& j, std::string_view default_preset,
                                      std::string_view where) {
  if (!j.is_object()) return make_error("{}: expected a JSON object of policy knobs", where);
  std::string preset(default_preset);
  if (auto it = j.find("policy"); it != j.end()) {
    if (!it->is_string()) return make_error("{}: \"policy\" must be a string", where);
    preset = it->get<std::string>();
  }
  Result<PolicyConfig> p = make_policy(preset);
  if (!p) return p;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "policy") continue;
    std::string text;
    if (!policy_knob_text(it.value(), text)) {
      return make_error("{}: knob {} must be a number, string, boolean or list of integers", where,
                        it.key());
    }
    if (Status st = set_policy_knob(*p, it.key(), text); !st) {
      return make_error("{}: {}", where, st.message());
    }
  }
  if (Status st = check_policy_complete(*p); !st) return make_error("{}: {}", where, st.message());
  return p;
}

}  // namespace

Result<PolicyConfig> policy_from_json_text(std::string_view json, std::string_view default_preset) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded()) return make_error("policy: not valid JSON");
  return policy_from_json(j, default_preset, "policy");
}

Result<PolicyConfig> load_policy_file(const std::string& path) {
  auto read = read_text_file(path, "policy file", int64_t{1} << 20);
  if (!read) return read.error();
  const std::string& text = *read;
  const std::string t = trim(text);
  if (!t.empty() && t[0] == '{') {
    nlohmann::json j = nlohmann::json::parse(t, nullptr, false);
    if (j.is_discarded()) return make_error("policy file '{}': not valid JSON", path);
    return policy_from_json(j, "auto", fmt::format("policy file '{}'", path));
  }
  std::string preset = "auto";
  std::vector<std::pair<int, std::string>> lines;
  std::istringstream ls(text);
  std::string line;
  for (int no = 1; std::getline(ls, line); ++no) {
    if (size_t h = line.find('#'); h != std::string::npos) line.resize(h);
    line = trim(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return make_error("policy file '{}' line {}: not key = value", path, no);
    }
    if (trim(line.substr(0, eq)) == "policy") {
      if (!lines.empty()) {
        return make_error("policy file '{}' line {}: put 'policy = NAME' before the knobs", path,
                          no);
      }
      preset = trim(line.substr(eq + 1));
      continue;
    }
    lines.emplace_back(no, line);
  }
  Result<PolicyConfig> p = make_policy(preset);
  if (!p) return make_error("policy file '{}': {}", path, p.message());
  for (const auto& [no, l] : lines) {
    if (Status st = set_policy_knob(*p, l); !st) {
      return make_error("policy file '{}' line {}: {}", path, no, st.message());
    }
  }
  return p;
}

bool is_auto(const PolicyConfig& p) {
  return p.preset == "auto";
}

int64_t auto_min_prompt() {
  return 128 + 2048 + 512;
}

PolicyConfig resolve_auto(const PolicyConfig& p, int64_t prompt_tokens) {
  if (!is_auto(p)) return p;
  if (prompt_tokens < std::max<int64_t>(auto_min_prompt(), p.threshold()))
    return *make_policy("dense");
  PolicyConfig r = p;
  r.preset = std::string(k_auto_preset);
  r.from_auto = true;
  return r;
}

}  // namespace sieve

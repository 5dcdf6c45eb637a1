// Sparse attention policies: one composable pipeline (docs/sparse.md) whose stages are
// configured by knobs, with presets that reproduce the published methods (dense, streaming,
// quest, h2o, tokenselect, sketch, stca, uniprefill) and `auto` (a sparse preset above a length
// threshold, dense below). Every knob is settable by name from `--set key=value`, a policy
// file, or a request; unknown names and bad values are errors listing the valid ones.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/result.h"
#include "sparse/head_plan.h"
#include "sparse/sketch_basis.h"

namespace sieve {

// How tokens are ranked.
enum class ScorerKind : uint8_t {
  all,      // no selection: attention reads every kept token (dense, h2o after eviction)
  none,     // no ranking: only the sinks and the local window are read (streaming)
  exact,    // q.K over the paged cache (TokenSelect)
  sketch,   // (qP).(KP) with a seeded random projection P to sketch_dim (SequenceO1)
  quest,    // per-block upper bound from the blocks' min/max keys (Quest)
  indexer,  // RTPurbo: the head plan's local heads read sinks + window, its retrieval heads
            // the top-p tokens of a low-dim pre-RoPE indexer (docs/sparse.md "RTPurbo")
};
// How the heads that share one selection combine their scores.
enum class AggregationKind : uint8_t {
  soft_vote,  // per-head softmax over tokens, summed (TokenSelect's head soft vote)
  hard_vote,  // each head votes for its own top-k; ranked by votes (ablation)
  raw_sum,    // raw logits summed over heads (ablation)
};
// Which heads share one selected index set.
enum class VoteScope : uint8_t { layer, group };
// What happens to KV memory.
enum class MemoryKind : uint8_t {
  keep,        // every token stays; attention reads the selected ones
  evict_h2o,   // accumulated attention; keep top heavy hitters + window (H2O)
  evict_stca,  // decayed sketch importance; keep the smallest set reaching mass p (STCA)
};
enum class PositionMode : uint8_t {
  auto_,     // compact when the sequence exceeds the model's trained context, else original
  original,  // selected tokens keep their original positions
  compact,   // selected tokens renumbered 0..|S|-1 (length extrapolation)
};
// Where the exact scorer places the query and the keys it ranks.
enum class ScorePositions : uint8_t {
  auto_,     // none while compact positions are in effect, else original
  original,  // each key at its stored position, the query at its own (attention's RoPE distances)
  none,      // query and keys both at position 0: pre-RoPE dot products (TokenSelect's public code)
};
// Whether a reused selection reads its rows from a contiguous copy (keep_rows).
enum class KeepRows : uint8_t {
  auto_,  // while compact positions are in effect (the copy also saves re-rotating every row)
  on,
  off,
};
enum class PrefillMode : uint8_t {
  dense,       // prefill chunks attend to everything kept
  chunk,       // one selection per chunk from the chunk's mean query (TokenSelect)
  uniprefill,  // token dropping at selection layers that every later layer skips (UniPrefill)
};

struct PolicyConfig {
  std::string preset = "dense";  // the preset the knobs started from
  ScorerKind scorer = ScorerKind::all;
  AggregationKind aggregation = AggregationKind::soft_vote;
  VoteScope scope = VoteScope::layer;
  MemoryKind memory = MemoryKind::keep;
  PositionMode positions = PositionMode::original;
  ScorePositions score_positions = ScorePositions::original;
  PrefillMode prefill = PrefillMode::dense;
  // prefill=chunk: chunks that reach into the prompt's last prefill_tail tokens prefill densely
  // (0: every chunk selects, as the paper). The question of a long-context prompt sits there.
  int32_t prefill_tail = 0;
  // Set by resolve_auto (not a knob): the policy is auto's choice, which a backend may run its
  // own faster way (the CUDA backend prefills it densely).
  bool from_auto = false;

  int32_t top_k = 2048;     // selected tokens (0: no top-k; with top_p: a cap when > 0)
  float top_p = 0.0f;       // > 0: smallest set reaching this mass of the aggregated score
  int32_t min_keep = 0;     // floor of the selected set under top_p
  int32_t sinks = 128;      // first tokens, always read
  int32_t local = 512;      // most recent tokens, always read
  int32_t block = 1;        // selection granularity in tokens (1 = token level)
  int32_t pool_kernel = 0;  // max-pool smoothing width over neighbouring scores (0/1 = off)
  bool raw_logits = false;  // score softmax without the model's 1/sqrt(d) scale (public code)
  float theta = 0.9f;       // selection cache: reuse while cos(fingerprint) >= theta
  // The threshold while compact positions are in effect (0: theta). Past the trained window a
  // stale selection truncates copied numbers (auto: 0.9 there, 0.7 inside the window).
  float compact_theta = 0.0f;
  bool selection_cache = true;
  // While a selection is reused, keep a contiguous f16 copy of its sinks' and picks' K/V rows
  // (K already at its attention position) instead of gathering and re-rotating them each step.
  KeepRows keep_rows = KeepRows::auto_;
  int32_t sketch_dim = 0;     // 0: head_dim / 8
  bool sketch_shared = true;  // one projection for all heads, else one per KV head
  uint64_t seed = 0x51E7E;    // projection seed
  // Eviction (h2o, stca).
  int32_t kv_budget = 4096;    // tokens a sequence may hold per layer before eviction runs
  float keep_mass = 0.9f;      // stca: kept importance mass p
  float decay = 0.99f;         // stca: importance decay per step (h2o: 1)
  int32_t evict_floor = 1024;  // stca: minimum tokens kept besides sinks and window
  // Below this many context tokens a layer attends densely (0: sinks + top_k + local).
  int32_t min_context = 0;
  // UniPrefill (prefill=uniprefill; docs/sparse.md "Prefill token dropping").
  std::vector<int32_t> up_layers;  // selection layers, ascending (empty: auto for the model)
  int32_t up_queries = 128;        // last prompt tokens that score every key
  int32_t up_block = 64;           // tokens per kept-or-dropped block
  float up_p = 0.99f;              // kept blocks: the smallest set reaching this mass
  int32_t up_sinks = 128;          // first positions always kept
  int32_t up_tail = 128;           // last tokens of the chunk always kept (the queries)
  int32_t up_min_prompt = 2048;    // shorter prompts are prefilled densely
  int32_t up_chunk = 32768;        // prefill chunk of a uniprefill prompt (selection is per chunk)
  // RTPurbo (scorer=indexer; docs/sparse.md "RTPurbo (head plan)").
  std::string sketch_basis;                  // sketch: PCA basis file ("" = random projection)
  std::shared_ptr<const SketchBasis> basis;  // loaded once when sketch_basis is set
  std::string head_plan;                     // path of the plan (sieve calibrate --out)
  std::shared_ptr<const HeadPlan> plan;      // loaded once when head_plan is set
  int32_t rt_sinks = 4;                      // first tokens every head reads
  int32_t rt_window = 0;                     // local heads' window (0: n_ctx_train / 4)
  float rt_gain = 1.0f;    // indexer logits x gain before top-p (> 1: sharper, fewer tokens)
  float rt_refine = 0.0f;  // > 0: exact re-scoring of the picks, top-p with sinks + window counted

  // Attention reads every kept token at decode and no token is evicted.
  bool dense_attention() const { return scorer == ScorerKind::all && memory == MemoryKind::keep; }
  bool drops_prefill() const { return prefill == PrefillMode::uniprefill; }
  // Nothing differs from dense: no per-sequence sparse state is needed.
  bool is_dense() const { return dense_attention() && !drops_prefill(); }
  bool evicts() const { return memory != MemoryKind::keep; }
  bool uses_head_plan() const { return scorer == ScorerKind::indexer; }
  // Context length from which selection starts.
  int32_t threshold() const;
  // `preset key=value key=value ...` - for logs, records and reports.
  std::string describe() const;
};

// Presets, in the order help lists them.
std::span<const std::string_view> policy_presets();
// The preset `auto` resolves to for long prompts, and the length from which it does.
std::string_view auto_sparse_preset();

// A preset by name ("auto" gives the auto policy).
Result<PolicyConfig> make_policy(std::string_view preset);
// Sets one knob by name; the error names the knob and its valid values, or lists the knobs.
Status set_policy_knob(PolicyConfig& p, std::string_view key, std::string_view value);
// "key=value" form.
Status set_policy_knob(PolicyConfig& p, std::string_view assignment);
// preset + assignments, in order.
Result<PolicyConfig> make_policy(std::string_view preset, std::span<const std::string> assignments);
// A policy item as the command line takes it, NAME or NAME:key=value:...: the name, then the
// assignments in order (not checked here).
struct PolicyItem {
  std::string name;
  std::vector<std::string> assignments;
};
PolicyItem split_policy_item(std::string_view item);
// A policy file: JSON {"policy": NAME, "knob": value, ...} or lines `key = value` (with an
// optional `policy = NAME` line first; '#' comments). Later knobs override earlier ones.
Result<PolicyConfig> load_policy_file(const std::string& path);
// Applies a JSON object's fields (policy first, then knobs) - the server's "sieve" field.
Result<PolicyConfig> policy_from_json_text(std::string_view json, std::string_view default_preset);
// A knob's JSON value (a policy file's or a request's) as the text set_policy_knob takes:
// strings, booleans, numbers, and lists of integers ("7,11,15"); false for anything else.
bool policy_knob_text(const nlohmann::json& v, std::string& out);

// A policy that uses a head plan (rtpurbo) has one; the error names the command that writes it.
Status check_policy_complete(const PolicyConfig& p);

// Knob names and one-line help, for --help and errors.
struct KnobInfo {
  std::string_view name;
  std::string_view help;
};
std::span<const KnobInfo> policy_knobs();

// `auto` (preset == "auto") carries the knobs of auto_sparse_preset(); per sequence it
// resolves to that preset when the prompt reaches auto_min_prompt() tokens, else to dense.
bool is_auto(const PolicyConfig& p);
int64_t auto_min_prompt();
PolicyConfig resolve_auto(const PolicyConfig& p, int64_t prompt_tokens);
// prefill_tail: whether a prefill chunk ending at token chunk_end (exclusive) of a prompt of
// prompt_tokens reaches into its last `tail` tokens and so attends densely (the CPU and GPU rule;
// the CPU skips it while compact positions are in effect, which the GPU refuses).
inline bool in_prefill_tail(int32_t tail, int64_t chunk_end, int64_t prompt_tokens) {
  return tail > 0 && chunk_end > prompt_tokens - tail;
}

using PolicyPtr = std::shared_ptr<const PolicyConfig>;

}  // namespace sieve

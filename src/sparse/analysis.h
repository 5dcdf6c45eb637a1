// Attention diagnostics behind `sieve analyze` (docs/analyze.md): for one query in one layer,
// how much of the true attention mass each selection method's key set captures at an equal
// budget, how block granularity limits the recall of the critical tokens (TokenSelect's
// granularity figure), and the query statistics TokenSelect's observations rest on (per-head
// logit norms, similarity of consecutive decode queries). Pure functions over arrays: the
// driver (tools/sieve/cmd_analyze.cpp) runs the model and feeds them; tests compare them with
// brute-force references. The selection stages themselves come from sparse/select.h, so the
// figures measure the code the engine runs.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rope_mode.h"

namespace sieve {

// A budget of `budget` keys = sinks (the first keys) + top_k picked + local (the most recent
// keys, the query's own key included).
struct BudgetSplit {
  int32_t budget = 0;
  int32_t sinks = 0;
  int32_t top_k = 0;
  int32_t local = 0;
};

// TokenSelect's public defaults: 128 sinks + 2048 picked + 512 recent = 2688 keys.
inline constexpr int32_t kDefaultBudget = 2688;

// The split of `budget` keys over a context of n keys. sinks / local < 0 take TokenSelect's
// proportions of the budget (128/2688 and 512/2688, rounded), so 2688 splits 128/2048/512.
// The budget is clamped to n, sinks to the budget and local to what the sinks leave.
BudgetSplit split_budget(int32_t budget, int32_t n, int32_t sinks = -1, int32_t local = -1);

// The budget analysed for a context of n keys: `requested`, scaled down to n / 2 when it
// exceeds that (a budget covering most of a short context measures nothing), at least 1.
int32_t scaled_budget(int32_t requested, int32_t n);

enum class AnalysisMethod : uint8_t {
  oracle,             // top-B keys by true attention summed over heads (the upper bound)
  tokenselect,        // exact scores, head soft vote, one set per layer (public code's scope)
  tokenselect_group,  // the same with one set per KV group
  hard_vote,          // exact scores, each head votes its top-k
  raw_sum,            // exact scores summed over heads
  sketch,             // JL sketch scores, head soft vote
  quest,              // per-block min/max key bound, top blocks
  streaming,          // sinks + the most recent keys
  h2o,                // accumulated true attention of earlier queries
};
std::span<const AnalysisMethod> analysis_methods();
std::string_view method_name(AnalysisMethod m);

// One query (all its heads) in one layer, as the methods see it. Keys are [0, n) in position
// order with the query's own key last; head h reads KV head h / (n_head / n_head_kv).
struct LayerQuery {
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t n = 0;
  float scale = 1.0f;                    // the model's attention scale (multiplies q.k)
  const float* logits = nullptr;         // [n_head, n] raw q.k
  const float* prob = nullptr;           // [n_head, n] true attention softmax(scale * q.k)
  const float* sketch_logits = nullptr;  // [n_head, n] (qP).(kP); nullptr: no sketch method
  const float* quest_bound = nullptr;    // [n_head, ceil(n / quest_block)] q . bound of each
                                         // block (min/max over its keys); nullptr: no quest
  int32_t quest_block = 16;
  const float* history = nullptr;  // [n] true attention of earlier queries summed over heads
                                   // (0 for keys they did not see); nullptr: no h2o
};

// Whether lq carries what method m needs.
bool method_available(const LayerQuery& lq, AnalysisMethod m);

// The ascending key indices method m reads for the heads [h0, h1) under split s
// (|result| <= s.budget). Score-based methods rank the middle keys [sinks, n - local) and add
// the sinks and the window; oracle and streaming spend the whole budget their own way.
std::vector<int32_t> select_keys(const LayerQuery& lq, AnalysisMethod m, const BudgetSplit& s,
                                 int32_t h0, int32_t h1);

// Mean over heads [h0, h1) of the attention mass on `keys`: sum_{j in keys} prob[h, j].
double mass_recall(const float* prob, int32_t n, int32_t h0, int32_t h1,
                   std::span<const int32_t> keys);

// Recall of the true attention mass by method m (mean over all heads). tokenselect_group
// selects per KV group and scores each head against its group's set; the others select one
// set for all heads.
double method_recall(const LayerQuery& lq, AnalysisMethod m, const BudgetSplit& s);

// Blocks b cover [b * block, (b + 1) * block) clipped to [begin, end); block_score[b] ranks
// them (ties to the lower block). Takes blocks in rank order until k tokens are taken; the
// block that does not fit whole gives its first tokens, so exactly min(k, end - begin)
// tokens are returned, ascending. block_score has ceil(end / block) entries (blocks before
// `begin / block` are ignored).
std::vector<int32_t> pick_blocks(const float* block_score, int32_t block, int32_t begin,
                                 int32_t end, int32_t k);

// TokenSelect's granularity measure: the critical set is the top-k keys by `score` (ties to
// the lower index); blocks of `block` keys ranked by their summed score are taken until k
// keys (pick_blocks); returns |taken ∩ critical| / k. 1 when block == 1.
double block_recall(const float* score, int32_t n, int32_t k, int32_t block);

// Quest's per-block key bounds: for each block of `block` rows of k ([n, d]), the elementwise
// min and max ([ceil(n / block), d] each; the last block may be partial).
void block_min_max(const float* k, int32_t n, int32_t d, int32_t block, float* mn, float* mx);
// Quest's upper bound of q . k over a block: sum_i max(q_i * mn_i, q_i * mx_i).
float quest_bound(const float* q, const float* mn, const float* mx, int32_t d);

// Rotates each head of q ([n_head, head_dim], rotated at position pos) back to position 0:
// the selection cache's fingerprint is taken there so that position drift does not lower
// the cosine.
void rotate_to_origin(float* q, int32_t n_head, int32_t head_dim, int32_t n_rot, float base,
                      RopeMode mode, int32_t pos, const RopeScaling& scaling = {});
// Mean over heads of the cosine similarity of a and b ([n_head, head_dim] each).
double mean_head_cosine(const float* a, const float* b, int32_t n_head, int32_t head_dim);
// out[0..head_dim) = mean over heads of q ([n_head, head_dim]).
void mean_over_heads(const float* q, int32_t n_head, int32_t head_dim, float* out);

// Top-p budget of an attention row: for each mass m in `masses` ((0, 1] each), the smallest
// number of entries of p whose sum reaches m * sum(p) (the row renormalised over its own
// entries): entries sorted descending, counted until the running sum reaches the target.
// One sort serves every mass. 0 for an empty row (or an all-zero one).
std::vector<int32_t> top_p_counts(std::span<const float> p, std::span<const double> masses);

// The middle keys [first, second) of a row of n keys: past the first `sinks`, before the
// last `window` (an empty range when they overlap).
std::pair<int32_t, int32_t> middle_keys(int32_t n, int32_t sinks, int32_t window);

// The top-p budgets of every head of one query: out_all[h * n_mass + i] over all keys [0, n)
// of prob[h] ([n_head, n]), out_mid[h * n_mass + i] over the middle keys
// [sinks, n - window) renormalised over them (-1 when no key is in the middle).
void top_p_budgets(const float* prob, int32_t n_head, int32_t n, std::span<const double> masses,
                   int32_t sinks, int32_t window, int32_t* out_all, int32_t* out_mid);

double l1_norm(const float* x, int64_t n);
// Median (the mean of the middle two for an even count); 0 for an empty list.
double median(std::vector<double> v);

}  // namespace sieve

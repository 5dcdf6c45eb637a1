// The pure stages of the selection pipeline (docs/sparse.md): aggregation of per-head
// scores, smoothing, the budget (top-k / top-p with a floor, token or block granularity),
// the final key set with sinks and window, eviction plans, and the selection-cache test.
// No KV store, no threads: the engine feeds them scores and applies their answers, and
// tests compare them with brute-force references.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sparse/policy.h"

namespace sieve {

// Combines the scores of n_heads heads over n tokens into one score per token.
//   logits: [n_heads, n] raw q.k (already multiplied by `scale` where the policy wants it)
//   soft_vote: out[j] = sum_h softmax_h(logits_h)[j]   (sums to n_heads)
//   hard_vote: out[j] = #heads whose top-`k` contains j, plus soft_vote / (n_heads + 1) as a
//              tie-break below one vote
//   raw_sum:   out[j] = sum_h logits_h[j]
// logits is used as scratch (overwritten).
void aggregate_scores(float* logits, int32_t n_heads, int32_t n, AggregationKind kind, int32_t k,
                      float* out);

// out[j] = max(in[j - w/2 .. j - w/2 + w - 1]) clipped to [0, n) (w <= 1: copy).
void max_pool_scores(const float* in, int32_t n, int32_t w, float* out);

// Picks tokens of [0, n) by score: top-k (k > 0), or top-p over the scores normalised to
// mass 1 (p > 0: the smallest set reaching p, at least min_keep, at most k when k > 0).
// block > 1 ranks blocks of `block` consecutive tokens by their summed score and keeps
// whole blocks while the token budget allows (the last block may be partial). Scores must
// be >= 0 for top-p. Returns ascending indices. Ties break towards the lower index.
// Token-granularity top-p is the sort-free radix selection of topp.h (same set).
std::vector<int32_t> pick_tokens(const float* score, int32_t n, int32_t k, float p,
                                 int32_t min_keep, int32_t block);

// The keys a query chunk reads: sinks [0, min(sinks, n_prefix)), picked (ascending, indices
// relative to `pick_begin`; those falling among the sinks or the window are dropped), the
// window [n_prefix - local, n_prefix), then the chunk's own tokens
// [n_prefix, n_prefix + n_chunk) - ascending and without duplicates.
void build_key_set(int32_t n_prefix, int32_t n_chunk, int32_t sinks, int32_t local,
                   int32_t pick_begin, std::span<const int32_t> picked, std::vector<int32_t>& out);

// Eviction plan for one stream of n tokens with importance[n]: the ascending indices to
// DROP. Sinks and the window are kept. h2o: keep the `budget - sinks - local` most important
// of the rest. stca: keep the smallest set whose importance reaches `mass` of the rest's
// total, at least `floor` tokens (and at most budget - sinks - local). Nothing is dropped
// when n <= budget.
std::vector<int32_t> plan_eviction(const float* importance, int32_t n, MemoryKind kind,
                                   int32_t budget, int32_t sinks, int32_t local, float mass,
                                   int32_t floor);

float cosine_similarity(const float* a, const float* b, int32_t n);

}  // namespace sieve

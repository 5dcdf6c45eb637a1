#include "sparse/select.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "sparse/topp.h"

namespace sieve {
namespace {

// Softmax of row[0..n) in place (double accumulation: the row may hold a million tokens).
void softmax_row(float* row, int32_t n) {
  if (n == 0) return;
  const float m = *std::max_element(row, row + n);
  double sum = 0;
  for (int32_t j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - m);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int32_t j = 0; j < n; ++j) row[j] *= inv;
}

// Indices of the k largest values (ties to the lower index), ascending: topp.h's top-k.
std::vector<int32_t> top_indices(const float* v, int32_t n, int32_t k) {
  thread_local TopPScratch scratch;
  std::vector<int32_t> out;
  top_k_select(v, n, k, out, scratch);
  return out;
}

}  // namespace

void aggregate_scores(float* logits, int32_t n_heads, int32_t n, AggregationKind kind, int32_t k,
                      float* out) {
  std::fill(out, out + n, 0.0f);
  if (kind == AggregationKind::raw_sum) {
    for (int32_t h = 0; h < n_heads; ++h) {
      const float* row = logits + int64_t{h} * n;
      for (int32_t j = 0; j < n; ++j) out[j] += row[j];
    }
    return;
  }
  std::vector<float> votes;
  if (kind == AggregationKind::hard_vote) votes.assign(n, 0.0f);
  for (int32_t h = 0; h < n_heads; ++h) {
    float* row = logits + int64_t{h} * n;
    if (kind == AggregationKind::hard_vote) {
      for (int32_t j : top_indices(row, n, k > 0 ? k : n)) votes[j] += 1.0f;
    }
    softmax_row(row, n);
    for (int32_t j = 0; j < n; ++j) out[j] += row[j];
  }
  if (kind == AggregationKind::hard_vote) {
    const float tie = 1.0f / static_cast<float>(n_heads + 1);
    for (int32_t j = 0; j < n; ++j) out[j] = votes[j] + out[j] * tie;
  }
}

void max_pool_scores(const float* in, int32_t n, int32_t w, float* out) {
  if (w <= 1) {
    std::copy(in, in + n, out);
    return;
  }
  const int32_t left = w / 2;
  for (int32_t j = 0; j < n; ++j) {
    const int32_t a = std::max(0, j - left), b = std::min(n, j - left + w);
    out[j] = *std::max_element(in + a, in + b);
  }
}

std::vector<int32_t> pick_tokens(const float* score, int32_t n, int32_t k, float p,
                                 int32_t min_keep, int32_t block) {
  if (n <= 0) return {};
  block = std::max(block, 1);
  if (block == 1) {  // token granularity: the sort-free radix selections
    if (p <= 0.0f) return top_indices(score, n, k > 0 ? k : n);
    std::vector<int32_t> out;
    TopPScratch scratch;
    top_p_select(score, n, TopPParams{p, min_keep, k > 0 ? k : 0}, out, scratch);
    return out;
  }
  // Blocks of `block` tokens, scored by their sum.
  const int32_t n_blocks = (n + block - 1) / block;
  std::vector<float> bscore(n_blocks, 0.0f);
  for (int32_t j = 0; j < n; ++j) bscore[j / block] += score[j];
  const float* s = bscore.data();
  // Blocks in rank order, as far as needed.
  std::vector<int32_t> order;
  auto better = [s](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); };
  const int64_t cap_tokens = k > 0 ? k : int64_t{n};
  std::vector<int32_t> chosen;
  if (p > 0.0f) {
    order.resize(n_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), better);
    double total = 0;
    for (int32_t b = 0; b < n_blocks; ++b) total += std::max(0.0f, s[b]);
    double acc = 0;
    int64_t tokens = 0;
    for (int32_t b : order) {
      const int32_t len = std::min(block, n - b * block);
      const bool reached = total > 0 && acc >= p * total * (1 - 1e-6);  // float sums
      if (reached && tokens >= min_keep) break;
      if (tokens + len > cap_tokens) break;
      chosen.push_back(b);
      acc += std::max(0.0f, s[b]);
      tokens += len;
    }
  } else {
    const int32_t want_blocks =
        static_cast<int32_t>(std::min<int64_t>(n_blocks, (cap_tokens + block - 1) / block));
    order = top_indices(s, n_blocks, want_blocks);
    std::sort(order.begin(), order.end(), better);  // the budget may cut the last block
    int64_t tokens = 0;
    for (int32_t b : order) {
      const int32_t len = std::min(block, n - b * block);
      if (tokens >= cap_tokens) break;
      chosen.push_back(b);
      tokens += len;
    }
  }
  std::sort(chosen.begin(), chosen.end());  // in rank order
  std::vector<int32_t> out;
  for (int32_t b : chosen) {
    for (int32_t j = b * block; j < std::min(n, (b + 1) * block); ++j) out.push_back(j);
  }
  return out;
}

void build_key_set(int32_t n_prefix, int32_t n_chunk, int32_t sinks, int32_t local,
                   int32_t pick_begin, std::span<const int32_t> picked, std::vector<int32_t>& out) {
  const int32_t sink_end = std::min(sinks, n_prefix);
  const int32_t win_begin = std::max(sink_end, n_prefix - local);
  const int32_t end = n_prefix + n_chunk;
  // The picks inside [sink_end, win_begin) are one run of the ascending list: found by binary
  // search and copied whole (a reused decode selection rebuilds ~2,700 keys a layer, its
  // picks cold in the cache by then).
  const int32_t* a =
      std::lower_bound(picked.data(), picked.data() + picked.size(), sink_end - pick_begin);
  const int32_t* b = std::lower_bound(a, picked.data() + picked.size(), win_begin - pick_begin);
  out.resize(static_cast<size_t>(sink_end) + (b - a) + std::max(0, end - win_begin));
  int32_t* o = out.data();
  std::iota(o, o + sink_end, 0);
  o += sink_end;
  o = std::transform(a, b, o, [pick_begin](int32_t r) { return pick_begin + r; });
  std::iota(o, out.data() + out.size(), win_begin);
}

std::vector<int32_t> plan_eviction(const float* importance, int32_t n, MemoryKind kind,
                                   int32_t budget, int32_t sinks, int32_t local, float mass,
                                   int32_t floor) {
  std::vector<int32_t> drop;
  if (kind == MemoryKind::keep || n <= budget) return drop;
  const int32_t mid_begin = std::min(sinks, n);
  const int32_t mid_end = std::max(mid_begin, n - local);
  const int32_t n_mid = mid_end - mid_begin;
  const int32_t room = std::max(0, budget - (n - n_mid));
  int32_t keep_n = room;
  if (kind == MemoryKind::evict_stca) {
    std::vector<int32_t> order(n_mid);
    std::iota(order.begin(), order.end(), 0);
    const float* imp = importance + mid_begin;
    std::sort(order.begin(), order.end(), [imp](int32_t a, int32_t b) {
      return imp[a] > imp[b] || (imp[a] == imp[b] && a < b);
    });
    double total = 0;
    for (int32_t j = 0; j < n_mid; ++j) total += std::max(0.0f, imp[j]);
    double acc = 0;
    keep_n = 0;
    while (keep_n < n_mid && (total <= 0 || acc < mass * total || keep_n < floor)) {
      acc += std::max(0.0f, imp[order[keep_n]]);
      ++keep_n;
    }
    keep_n = std::min(keep_n, room);
  }
  std::vector<int32_t> keep = top_indices(importance + mid_begin, n_mid, keep_n);
  std::vector<char> kept(n_mid, 0);
  for (int32_t j : keep) kept[j] = 1;
  for (int32_t j = 0; j < n_mid; ++j) {
    if (!kept[j]) drop.push_back(mid_begin + j);
  }
  return drop;
}

float cosine_similarity(const float* a, const float* b, int32_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int32_t i = 0; i < n; ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  if (aa == 0 || bb == 0) return 0.0f;
  return static_cast<float>(ab / std::sqrt(aa * bb));
}

}  // namespace sieve

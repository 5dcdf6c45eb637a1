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

// Indices of the k largest values (ties to the lower index), ascending.
// Radix select over the order-preserving key (topp_key): a histogram of the top 11 bits finds
// the bin holding the k-th value; one pass then splits the indices into those of higher bins
// (all in) and those of that bin (the candidates); the next 11 and 10 bits, histogrammed over
// the candidates alone, give the exact k-th key T and how many keys equal to T are in. The
// chosen candidates, in index order, merge with the rest. Two passes over n, no sort.
// (A decode miss picks 2,048 of ~16K soft-vote scores, which crowd a few bins: the histogram
// counts into four interleaved copies so that consecutive increments of one bin do not wait
// on each other, and the passes that split indices write both ways without a branch.)
std::vector<int32_t> top_indices(const float* v, int32_t n, int32_t k) {
  k = std::max(0, std::min(k, n));
  std::vector<int32_t> out;
  if (k == 0) return out;
  if (k == n) {
    out.resize(n);
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  constexpr int kShift0 = 21, kBins = 1 << 11, kCopies = 4;
  thread_local std::vector<uint32_t> key;
  thread_local std::vector<int32_t> hist4, higher, cand;
  key.resize(n);
  hist4.assign(static_cast<size_t>(kCopies) * kBins, 0);
  uint32_t* kp = key.data();
  for (int32_t i = 0; i < n; ++i) kp[i] = topp_key(v[i]);
  int32_t* h = hist4.data();
  int32_t j = 0;
  for (; j + kCopies <= n; j += kCopies) {
    h[kp[j] >> kShift0]++;
    h[kBins + (kp[j + 1] >> kShift0)]++;
    h[2 * kBins + (kp[j + 2] >> kShift0)]++;
    h[3 * kBins + (kp[j + 3] >> kShift0)]++;
  }
  for (; j < n; ++j) h[kp[j] >> kShift0]++;
  int32_t above = 0, bin = kBins - 1, in_bin = 0;
  for (;; --bin) {
    in_bin = hist4[bin] + hist4[kBins + bin] + hist4[2 * kBins + bin] + hist4[3 * kBins + bin];
    if (above + in_bin >= k) break;
    above += in_bin;
  }
  higher.resize(static_cast<size_t>(above) + 1);
  cand.resize(static_cast<size_t>(in_bin) + 1);
  int32_t n_higher = 0, n_cand = 0;
  for (j = 0; j < n; ++j) {
    const uint32_t b = key[j] >> kShift0;
    higher[n_higher] = j;
    n_higher += b > static_cast<uint32_t>(bin);
    cand[n_cand] = j;
    n_cand += b == static_cast<uint32_t>(bin);
  }
  // The exact k-th key inside the bin: bits 20..10, then 9..0 among the keys sharing them.
  int32_t need = k - above;
  uint32_t t = static_cast<uint32_t>(bin) << kShift0;
  int32_t hist[kBins];
  for (const auto& [bits, shift] : {std::pair{11, 10}, std::pair{10, 0}}) {
    const uint32_t mask = (1u << bits) - 1u, prefix_mask = ~((mask << shift) | ((1u << shift) - 1u));
    std::fill(hist, hist + (1 << bits), 0);
    for (int32_t i = 0; i < n_cand; ++i) {
      const uint32_t u = key[cand[i]];
      if ((u & prefix_mask) == t) hist[(u >> shift) & mask]++;
    }
    int32_t b = static_cast<int32_t>(mask);
    for (; b > 0 && hist[b] < need; --b) need -= hist[b];
    t |= static_cast<uint32_t>(b) << shift;
  }
  // Keys above t are in, and the first `need` keys equal to t.
  int32_t n_pick = 0, ties = 0;
  for (int32_t i = 0; i < n_cand; ++i) {
    const int32_t c = cand[i];
    const bool tie = key[c] == t;
    cand[n_pick] = c;
    n_pick += (key[c] > t) | (tie & (ties < need));
    ties += tie;
  }
  out.resize(static_cast<size_t>(n_higher) + n_pick);  // == k
  std::merge(higher.begin(), higher.begin() + n_higher, cand.begin(), cand.begin() + n_pick, out.begin());
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

std::vector<int32_t> pick_tokens(const float* score, int32_t n, int32_t k, float p, int32_t min_keep,
                                 int32_t block) {
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
    const int32_t want_blocks = static_cast<int32_t>(std::min<int64_t>(n_blocks, (cap_tokens + block - 1) / block));
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
  const int32_t* a = std::lower_bound(picked.data(), picked.data() + picked.size(), sink_end - pick_begin);
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
    std::sort(order.begin(), order.end(),
              [imp](int32_t a, int32_t b) { return imp[a] > imp[b] || (imp[a] == imp[b] && a < b); });
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

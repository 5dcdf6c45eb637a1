#include "sparse/analysis.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "backend/cpu/ops.h"
#include "core/assert.h"
#include "sparse/select.h"

namespace sieve {
namespace {

constexpr AnalysisMethod kMethods[] = {
    AnalysisMethod::oracle,    AnalysisMethod::tokenselect, AnalysisMethod::tokenselect_group,
    AnalysisMethod::hard_vote, AnalysisMethod::raw_sum,     AnalysisMethod::sketch,
    AnalysisMethod::quest,     AnalysisMethod::streaming,   AnalysisMethod::h2o,
};

// The keys a score-based method ranks: [c0, c1).
struct Middle {
  int32_t c0 = 0, c1 = 0;
  int32_t size() const { return c1 - c0; }
};
Middle middle_of(const BudgetSplit& s, int32_t n) {
  Middle m;
  m.c0 = std::min(s.sinks, n);
  m.c1 = std::max(m.c0, n - s.local);
  return m;
}

// Scores of the middle keys by aggregating rows [h0, h1) of `rows` ([n_head, n]) times scale.
std::vector<float> aggregated(const float* rows, int32_t n, int32_t h0, int32_t h1, float scale,
                              Middle mid, AggregationKind kind, int32_t k) {
  const int32_t nm = mid.size(), nh = h1 - h0;
  std::vector<float> scratch(static_cast<size_t>(nh) * nm);
  for (int32_t h = 0; h < nh; ++h) {
    const float* src = rows + int64_t{h0 + h} * n + mid.c0;
    float* dst = scratch.data() + int64_t{h} * nm;
    for (int32_t j = 0; j < nm; ++j) dst[j] = scale * src[j];
  }
  std::vector<float> score(nm);
  aggregate_scores(scratch.data(), nh, nm, kind, k, score.data());
  return score;
}

}  // namespace

BudgetSplit split_budget(int32_t budget, int32_t n, int32_t sinks, int32_t local) {
  BudgetSplit s;
  s.budget = std::clamp(budget, 0, std::max(n, 0));
  const double b = s.budget;
  s.sinks = sinks >= 0 ? sinks : static_cast<int32_t>(std::lround(b * 128.0 / kDefaultBudget));
  s.local = local >= 0 ? local : static_cast<int32_t>(std::lround(b * 512.0 / kDefaultBudget));
  s.sinks = std::min(s.sinks, s.budget);
  s.local = std::min(s.local, s.budget - s.sinks);
  s.top_k = s.budget - s.sinks - s.local;
  return s;
}

int32_t scaled_budget(int32_t requested, int32_t n) {
  return std::max(1, std::min(requested, n / 2));
}

std::span<const AnalysisMethod> analysis_methods() {
  return kMethods;
}

std::string_view method_name(AnalysisMethod m) {
  switch (m) {
    case AnalysisMethod::oracle:
      return "oracle";
    case AnalysisMethod::tokenselect:
      return "tokenselect";
    case AnalysisMethod::tokenselect_group:
      return "tokenselect_group";
    case AnalysisMethod::hard_vote:
      return "hard_vote";
    case AnalysisMethod::raw_sum:
      return "raw_sum";
    case AnalysisMethod::sketch:
      return "sketch";
    case AnalysisMethod::quest:
      return "quest";
    case AnalysisMethod::streaming:
      return "streaming";
    case AnalysisMethod::h2o:
      return "h2o";
  }
  return "?";
}

bool method_available(const LayerQuery& lq, AnalysisMethod m) {
  switch (m) {
    case AnalysisMethod::sketch:
      return lq.sketch_logits != nullptr;
    case AnalysisMethod::quest:
      return lq.quest_bound != nullptr && lq.quest_block > 0;
    case AnalysisMethod::h2o:
      return lq.history != nullptr;
    default:
      return lq.prob != nullptr && lq.logits != nullptr;
  }
}

std::vector<int32_t> select_keys(const LayerQuery& lq, AnalysisMethod m, const BudgetSplit& s,
                                 int32_t h0, int32_t h1) {
  SIEVE_ASSERT(method_available(lq, m));
  SIEVE_ASSERT(0 <= h0 && h0 < h1 && h1 <= lq.n_head);
  const int32_t n = lq.n;
  std::vector<int32_t> keys;
  if (m == AnalysisMethod::oracle) {
    std::vector<float> sum(n, 0.0f);
    for (int32_t h = h0; h < h1; ++h) {
      const float* p = lq.prob + int64_t{h} * n;
      for (int32_t j = 0; j < n; ++j) sum[j] += p[j];
    }
    return s.budget > 0 ? pick_tokens(sum.data(), n, s.budget, 0.0f, 0, 1) : keys;
  }
  if (m == AnalysisMethod::streaming) {
    build_key_set(n, 0, s.sinks, s.budget - s.sinks, 0, {}, keys);
    return keys;
  }
  const Middle mid = middle_of(s, n);
  std::vector<int32_t> picked;  // relative to mid.c0
  if (s.top_k > 0 && mid.size() > 0) {
    switch (m) {
      case AnalysisMethod::tokenselect:
      case AnalysisMethod::tokenselect_group:
      case AnalysisMethod::hard_vote:
      case AnalysisMethod::raw_sum:
      case AnalysisMethod::sketch: {
        const AggregationKind kind = m == AnalysisMethod::hard_vote ? AggregationKind::hard_vote
                                     : m == AnalysisMethod::raw_sum ? AggregationKind::raw_sum
                                                                    : AggregationKind::soft_vote;
        const float* rows = m == AnalysisMethod::sketch ? lq.sketch_logits : lq.logits;
        const std::vector<float> score = aggregated(rows, n, h0, h1, lq.scale, mid, kind, s.top_k);
        picked = pick_tokens(score.data(), mid.size(), s.top_k, 0.0f, 0, 1);
        break;
      }
      case AnalysisMethod::quest: {
        const int32_t B = lq.quest_block, nb = (n + B - 1) / B;
        std::vector<float> bs(nb, 0.0f);
        for (int32_t h = h0; h < h1; ++h) {
          const float* row = lq.quest_bound + int64_t{h} * nb;
          for (int32_t b = 0; b < nb; ++b) bs[b] += lq.scale * row[b];
        }
        picked = pick_blocks(bs.data(), B, mid.c0, mid.c1, s.top_k);
        for (int32_t& j : picked) j -= mid.c0;
        break;
      }
      case AnalysisMethod::h2o:
        picked = pick_tokens(lq.history + mid.c0, mid.size(), s.top_k, 0.0f, 0, 1);
        break;
      default:
        SIEVE_ASSERT(false);
    }
  }
  build_key_set(n, 0, s.sinks, s.local, mid.c0, picked, keys);
  return keys;
}

double mass_recall(const float* prob, int32_t n, int32_t h0, int32_t h1,
                   std::span<const int32_t> keys) {
  if (h1 <= h0) return 0.0;
  double total = 0;
  for (int32_t h = h0; h < h1; ++h) {
    const float* p = prob + int64_t{h} * n;
    double s = 0;
    for (int32_t j : keys) s += p[j];
    total += s;
  }
  return total / (h1 - h0);
}

double method_recall(const LayerQuery& lq, AnalysisMethod m, const BudgetSplit& s) {
  if (m != AnalysisMethod::tokenselect_group) {
    const std::vector<int32_t> keys = select_keys(lq, m, s, 0, lq.n_head);
    return mass_recall(lq.prob, lq.n, 0, lq.n_head, keys);
  }
  const int32_t G = lq.n_head / lq.n_head_kv;
  double total = 0;
  for (int32_t g = 0; g < lq.n_head_kv; ++g) {
    const std::vector<int32_t> keys = select_keys(lq, m, s, g * G, (g + 1) * G);
    total += mass_recall(lq.prob, lq.n, g * G, (g + 1) * G, keys) * G;
  }
  return total / (G * lq.n_head_kv);
}

std::vector<int32_t> pick_blocks(const float* block_score, int32_t block, int32_t begin,
                                 int32_t end, int32_t k) {
  std::vector<int32_t> out;
  if (end <= begin || k <= 0) return out;
  block = std::max(block, 1);
  const int32_t b0 = begin / block, b1 = (end + block - 1) / block;
  std::vector<int32_t> order(b1 - b0);
  std::iota(order.begin(), order.end(), b0);
  std::sort(order.begin(), order.end(), [block_score](int32_t a, int32_t b) {
    return block_score[a] > block_score[b] || (block_score[a] == block_score[b] && a < b);
  });
  for (int32_t b : order) {
    const int32_t lo = std::max(begin, b * block), hi = std::min(end, (b + 1) * block);
    for (int32_t j = lo; j < hi && static_cast<int32_t>(out.size()) < k; ++j) out.push_back(j);
    if (static_cast<int32_t>(out.size()) >= k) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

double block_recall(const float* score, int32_t n, int32_t k, int32_t block) {
  k = std::min(k, n);
  if (k <= 0) return 1.0;
  block = std::max(block, 1);
  const std::vector<int32_t> critical = pick_tokens(score, n, k, 0.0f, 0, 1);
  const int32_t nb = (n + block - 1) / block;
  std::vector<float> bs(nb);
  for (int32_t b = 0; b < nb; ++b) {
    double s = 0;
    for (int32_t j = b * block; j < std::min(n, (b + 1) * block); ++j) s += score[j];
    bs[b] = static_cast<float>(s);
  }
  const std::vector<int32_t> taken = pick_blocks(bs.data(), block, 0, n, k);
  std::vector<int32_t> both;
  std::set_intersection(critical.begin(), critical.end(), taken.begin(), taken.end(),
                        std::back_inserter(both));
  return static_cast<double>(both.size()) / k;
}

void block_min_max(const float* k, int32_t n, int32_t d, int32_t block, float* mn, float* mx) {
  const int32_t nb = (n + block - 1) / block;
  for (int32_t b = 0; b < nb; ++b) {
    float* lo = mn + int64_t{b} * d;
    float* hi = mx + int64_t{b} * d;
    std::fill(lo, lo + d, INFINITY);
    std::fill(hi, hi + d, -INFINITY);
    for (int32_t j = b * block; j < std::min(n, (b + 1) * block); ++j) {
      const float* row = k + int64_t{j} * d;
      for (int32_t c = 0; c < d; ++c) {
        lo[c] = std::min(lo[c], row[c]);
        hi[c] = std::max(hi[c], row[c]);
      }
    }
  }
}

float quest_bound(const float* q, const float* mn, const float* mx, int32_t d) {
  float s = 0;
  for (int32_t i = 0; i < d; ++i) s += std::max(q[i] * mn[i], q[i] * mx[i]);
  return s;
}

void rotate_to_origin(float* q, int32_t n_head, int32_t head_dim, int32_t n_rot, float base,
                      RopeMode mode, int32_t pos, const RopeScaling& scaling) {
  const int32_t back = -pos;
  rope(q, &back, 1, n_head, head_dim, n_rot, base, mode, scaling);
}

double mean_head_cosine(const float* a, const float* b, int32_t n_head, int32_t head_dim) {
  double s = 0;
  for (int32_t h = 0; h < n_head; ++h) {
    s += cosine_similarity(a + int64_t{h} * head_dim, b + int64_t{h} * head_dim, head_dim);
  }
  return n_head > 0 ? s / n_head : 0.0;
}

void mean_over_heads(const float* q, int32_t n_head, int32_t head_dim, float* out) {
  for (int32_t c = 0; c < head_dim; ++c) {
    double s = 0;
    for (int32_t h = 0; h < n_head; ++h) s += q[int64_t{h} * head_dim + c];
    out[c] = static_cast<float>(s / n_head);
  }
}

std::vector<int32_t> top_p_counts(std::span<const float> p, std::span<const double> masses) {
  std::vector<float> v(p.begin(), p.end());
  std::sort(v.begin(), v.end(), std::greater<float>());
  // Prefix sums in the sorted order: the total is the last one, so a mass of 1 is reached
  // exactly at the last non-zero entry.
  std::vector<double> cum(v.size());
  double acc = 0;
  for (size_t i = 0; i < v.size(); ++i) cum[i] = acc += v[i];
  std::vector<int32_t> out;
  out.reserve(masses.size());
  for (double m : masses) {
    const double target = m * acc;
    if (v.empty() || target <= 0) {
      out.push_back(0);
      continue;
    }
    const auto it = std::lower_bound(cum.begin(), cum.end(), target);
    out.push_back(static_cast<int32_t>(std::min<ptrdiff_t>(it - cum.begin() + 1, std::ssize(cum))));
  }
  return out;
}

std::pair<int32_t, int32_t> middle_keys(int32_t n, int32_t sinks, int32_t window) {
  const int32_t c0 = std::clamp(sinks, 0, n);
  return {c0, std::max(c0, n - std::max(window, 0))};
}

void top_p_budgets(const float* prob, int32_t n_head, int32_t n, std::span<const double> masses,
                   int32_t sinks, int32_t window, int32_t* out_all, int32_t* out_mid) {
  const int32_t n_m = static_cast<int32_t>(masses.size());
  const auto [c0, c1] = middle_keys(n, sinks, window);
  for (int32_t h = 0; h < n_head; ++h) {
    const float* row = prob + int64_t{h} * n;
    const std::vector<int32_t> a = top_p_counts(std::span<const float>(row, n), masses);
    std::copy(a.begin(), a.end(), out_all + int64_t{h} * n_m);
    if (c1 > c0) {
      const std::vector<int32_t> m =
          top_p_counts(std::span<const float>(row + c0, c1 - c0), masses);
      std::copy(m.begin(), m.end(), out_mid + int64_t{h} * n_m);
    } else {
      std::fill_n(out_mid + int64_t{h} * n_m, n_m, -1);
    }
  }
}

double l1_norm(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(x[i]);
  return s;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  if (v.size() % 2) return v[m];
  const double hi = v[m];
  const double lo = *std::max_element(v.begin(), v.begin() + m);
  return 0.5 * (lo + hi);
}

}  // namespace sieve

#include "engine/step_planner.h"

#include <algorithm>
#include <cmath>

namespace sieve {
namespace {

// Feature scales: a typical step's features come out near 1, so one ridge weight suits all.
constexpr std::array<double, StepCostModel::kFeatures> kScale = {1.0, 1.0, 256.0, 8.0, 1e6};
// Pull toward the previous fit, relative to each feature's own weight in the data (so the
// scale of the features does not matter) plus a small floor: a direction the recent steps do
// not inform keeps its estimate instead of going to zero or wild.
constexpr double kRidge = 0.01;
constexpr double kRidgeFloor = 1e-3;  // of the mean diagonal

// Solves a x = b (n <= 4) by Gaussian elimination with partial pivoting; false if singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& x) {
  const size_t n = b.size();
  double scale = 0;
  for (const auto& row : a)
    for (double v : row) scale = std::max(scale, std::fabs(v));
  for (size_t c = 0; c < n; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[piv][c])) piv = r;
    if (std::fabs(a[piv][c]) <= 1e-12 * scale) return false;
    std::swap(a[c], a[piv]);
    std::swap(b[c], b[piv]);
    for (size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  x.assign(n, 0.0);
  for (size_t c = n; c-- > 0;) {
    double s = b[c];
    for (size_t k = c + 1; k < n; ++k) s -= a[c][k] * x[k];
    x[c] = s / a[c][c];
  }
  return true;
}

}  // namespace

int64_t chunk_kv_reads(int64_t n, int64_t depth) {
  return n * depth + n * (n + 1) / 2;
}

void StepShape::add_prefill(int64_t n, int64_t depth) {
  prefill_tokens += n;
  kv_reads += chunk_kv_reads(n, depth);
}

void StepShape::add_decode(int64_t depth) {
  decode_tokens += 1;
  kv_reads += depth + 1;
}

StepCostModel::StepCostModel(Coef prior, double forget) : forget_(forget) {
  for (int j = 0; j < kFeatures; ++j) prior_[j] = prior[j] * kScale[j];
  coef_ = prior_;
}

std::array<double, StepCostModel::kFeatures> StepCostModel::features(const StepShape& s) {
  return {1.0, s.prefill_tokens + s.decode_tokens > 1 ? 1.0 : 0.0,
          static_cast<double>(s.prefill_tokens) / kScale[2],
          static_cast<double>(s.decode_tokens) / kScale[3],
          static_cast<double>(s.kv_reads) / kScale[4]};
}

StepCostModel::Coef StepCostModel::per_unit() const {
  Coef c;
  for (int j = 0; j < kFeatures; ++j) c[j] = coef_[j] / kScale[j];
  return c;
}

double StepCostModel::linear_ms(const StepShape& s) const {
  const auto x = features(s);
  double ms = 0;
  for (int j = 0; j < kFeatures; ++j) ms += coef_[j] * x[j];
  return ms;
}

double StepCostModel::predict_ms(const StepShape& s) const {
  return linear_ms(s) * bias_[s.prefill_tokens > 0 ? 1 : 0];
}

void StepCostModel::observe(const StepShape& s, double ms) {
  if (!std::isfinite(ms) || ms < 0) return;
  const auto x = features(s);
  // Relative error is what matters (a 5 ms step 2 ms off is as bad as a 500 ms step 200 ms
  // off), so each step is weighted by 1/predicted^2: big steps do not drown the small ones.
  // (By the prediction, not the measurement, which would favour steps that happened to run
  // fast.)
  const double pred = std::max(predict_ms(s), 0.1);
  const double w = 1.0 / (pred * pred);
  double& bias = bias_[s.prefill_tokens > 0 ? 1 : 0];
  // One step moves the bias and the fit by a bounded amount (the first steps fault the weights
  // in; another process may take the core for a moment).
  const double lin = std::max(linear_ms(s), 0.1);
  bias = std::clamp(0.75 * bias + 0.25 * std::clamp(ms / lin, 0.5, 2.0), 0.25, 4.0);
  if (n_observed_ >= 8) ms = std::clamp(ms, pred / 3, pred * 3);
  for (int i = 0; i < kFeatures; ++i) {
    for (int j = 0; j < kFeatures; ++j) xtx_[i][j] = forget_ * xtx_[i][j] + w * x[i] * x[j];
    xty_[i] = forget_ * xty_[i] + w * x[i] * ms;
  }
  n_observed_++;
  refit();
}

// Ridge toward the previous coefficients, with an active set for non-negativity: a
// coefficient that comes out negative is fixed at 0 and the rest refitted (costs are never
// negative, and a negative one would let the planner grow a chunk without bound).
void StepCostModel::refit() {
  const Coef prev = coef_;
  double mean_diag = 0;
  for (int j = 0; j < kFeatures; ++j) mean_diag += xtx_[j][j] / kFeatures;
  std::array<double, kFeatures> ridge;
  for (int j = 0; j < kFeatures; ++j) ridge[j] = kRidge * xtx_[j][j] + kRidgeFloor * mean_diag;
  std::array<bool, kFeatures> free;
  free.fill(true);
  for (int round = 0; round < kFeatures; ++round) {
    std::vector<int> idx;
    for (int j = 0; j < kFeatures; ++j)
      if (free[j]) idx.push_back(j);
    if (idx.empty()) break;
    std::vector<std::vector<double>> a(idx.size(), std::vector<double>(idx.size()));
    std::vector<double> b(idx.size());
    for (size_t r = 0; r < idx.size(); ++r) {
      for (size_t c = 0; c < idx.size(); ++c)
        a[r][c] = xtx_[idx[r]][idx[c]] + (r == c ? ridge[idx[r]] : 0.0);
      b[r] = xty_[idx[r]] + ridge[idx[r]] * prev[idx[r]];
    }
    std::vector<double> x;
    if (!solve(a, b, x)) return;  // keep the previous fit
    bool negative = false;
    for (size_t r = 0; r < idx.size(); ++r) {
      if (x[r] < 0) {
        free[idx[r]] = false;
        negative = true;
      }
    }
    if (negative) continue;
    for (int j = 0; j < kFeatures; ++j) coef_[j] = 0;
    for (size_t r = 0; r < idx.size(); ++r) coef_[idx[r]] = x[r];
    return;
  }
  for (int j = 0; j < kFeatures; ++j) coef_[j] = free[j] ? coef_[j] : 0;
}

namespace {

// n grown so that `rows_before` + n fills a whole group of `group` rows, where that stays
// within `limit`; n itself otherwise.
int64_t fill_row_group(int64_t n, int64_t rows_before, int64_t limit, int32_t group) {
  if (group <= 1 || n <= 0) return n;
  const int64_t rows = rows_before + n;
  const int64_t filled = n + (group - rows % group) % group;
  return filled <= limit ? filled : n;
}

}  // namespace

double auto_step_budget(const StepCostModel& cost, const PlannerConfig& cfg,
                        const StepShape& decodes, std::span<const PrefillSlot> prefills,
                        double efficiency) {
  if (decodes.decode_tokens == 0) return 0;
  const PrefillSlot* first = nullptr;
  for (const PrefillSlot& p : prefills) {
    if (p.pending > 0 && p.fixed == 0) {
      first = &p;
      break;
    }
  }
  if (!first) return 0;
  const int64_t full =
      std::min<int64_t>(cfg.max_chunk, cfg.max_batch_tokens - decodes.decode_tokens);
  if (full <= 1) return 0;
  auto step_ms = [&](int64_t n) {
    StepShape s = decodes;
    s.add_prefill(n, first->depth);
    return cost.predict_ms(s);
  };
  auto rate = [&](int64_t n) { return static_cast<double>(n) / std::max(step_ms(n), 1e-6); };
  const double want = efficiency * rate(full);
  // The rate rises with n while the step's fixed costs dominate, then falls slowly (the
  // chunk's own causal keys): the smallest chunk that reaches `want`, as the planner would
  // make it (grown to fill its group of rows). A scan, not a bisection: the rounding makes the
  // rate a sawtooth, and 512 predictions cost microseconds.
  for (int64_t n = 1; n < full; ++n) {
    const int64_t m = fill_row_group(n, decodes.decode_tokens, full, cfg.row_group);
    if (rate(m) >= want) return step_ms(m);
  }
  return step_ms(full);
}

std::vector<int32_t> plan_prefill_chunks(const StepCostModel& cost, const PlannerConfig& cfg,
                                         const StepShape& decodes,
                                         std::span<const PrefillSlot> prefills) {
  std::vector<int32_t> chunk(prefills.size(), 0);
  int64_t tokens_left = cfg.max_batch_tokens - decodes.decode_tokens;
  const int32_t max_chunk = std::max(1, cfg.max_chunk);
  StepShape shape = decodes;
  // Fixed chunks (UniPrefill's one chunk) go first and may overrun both budgets, as before.
  for (size_t i = 0; i < prefills.size(); ++i) {
    if (prefills[i].fixed > 0 && prefills[i].pending > 0) {
      chunk[i] = std::min(prefills[i].fixed, prefills[i].pending);
      shape.add_prefill(chunk[i], prefills[i].depth);
      tokens_left -= chunk[i];
    }
  }
  auto cap = [&](size_t i) { return std::min(prefills[i].pending, max_chunk); };
  if (cfg.max_step_ms <= 0) {
    for (size_t i = 0; i < prefills.size() && tokens_left > 0; ++i) {
      if (prefills[i].fixed > 0 || prefills[i].pending <= 0) continue;
      chunk[i] = static_cast<int32_t>(std::min<int64_t>(cap(i), tokens_left));
      tokens_left -= chunk[i];
    }
    return chunk;
  }
  const double budget = cfg.max_step_ms;
  // Pass 1: a minimum chunk to the first prompt (regardless of the budget: prefill never
  // starves), then to each prompt with fewer tokens left than the first while the step stays
  // under the budget: a short prompt behind a long one starts within a few steps, while
  // prompts of equal length stay first come, first served (sharing each step among them would
  // delay every one of them, and the median time to first token with them).
  size_t head = prefills.size();
  for (size_t i = 0; i < prefills.size() && tokens_left > 0; ++i) {
    if (prefills[i].fixed > 0 || prefills[i].pending <= 0) continue;
    const bool first = head == prefills.size();
    if (!first && prefills[i].pending >= prefills[head].pending) continue;
    const int32_t n = static_cast<int32_t>(std::min<int64_t>({cap(i), cfg.min_chunk, tokens_left}));
    StepShape with = shape;
    with.add_prefill(n, prefills[i].depth);
    if (!first && cost.predict_ms(with) > budget) break;
    if (first) head = i;
    shape = with;
    chunk[i] = n;
    tokens_left -= n;
  }
  // Pass 2: grow the chunks, the prompts shorter than the first one first, then the rest in
  // order, each to the largest size the predicted time allows.
  std::vector<size_t> order;
  for (size_t i = 0; i < prefills.size(); ++i)
    if (chunk[i] > 0 && i != head) order.push_back(i);
  for (size_t i = 0; i < prefills.size(); ++i)
    if (chunk[i] == 0 || i == head) order.push_back(i);
  for (size_t i : order) {
    if (tokens_left <= 0) break;
    if (prefills[i].fixed > 0 || prefills[i].pending <= 0) continue;
    const int32_t have = chunk[i];
    const int64_t hi_limit = std::min<int64_t>(cap(i), have + tokens_left);
    if (hi_limit <= have) continue;
    StepShape base = shape;
    base.prefill_tokens -= have;
    base.kv_reads -= chunk_kv_reads(have, prefills[i].depth);
    auto fits = [&](int64_t n) {
      StepShape s = base;
      s.add_prefill(n, prefills[i].depth);
      return cost.predict_ms(s) <= budget;
    };
    int64_t lo = have, hi = hi_limit;  // lo fits (or is what pass 1 gave), find the largest
    if (!fits(lo + 1)) continue;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    chunk[i] = static_cast<int32_t>(lo);
    tokens_left -= lo - have;
    shape = base;
    shape.add_prefill(lo, prefills[i].depth);
  }
  // Pass 3: the last chunk grows to fill the step's group of rows (nearly free on the CPU GEMM,
  // which computes the group's missing rows anyway).
  if (cfg.row_group > 1) {
    int64_t rows = decodes.decode_tokens;
    for (int32_t n : chunk) rows += n;
    for (size_t i = prefills.size(); i-- > 0;) {
      if (chunk[i] == 0 || prefills[i].fixed > 0) continue;
      const int64_t limit = std::min<int64_t>(cap(i), chunk[i] + std::max<int64_t>(tokens_left, 0));
      chunk[i] =
          static_cast<int32_t>(fill_row_group(chunk[i], rows - chunk[i], limit, cfg.row_group));
      break;
    }
  }
  return chunk;
}

}  // namespace sieve

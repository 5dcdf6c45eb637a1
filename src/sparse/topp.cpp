#include "sparse/topp.h"

#include "backend/cpu/attention.h"

#include <algorithm>
#include <iterator>
#include <limits>

namespace sieve {

namespace {

inline double mass_of(float s) { return s > 0.0f ? static_cast<double>(s) : 0.0; }

// Radix levels over the 32 key bits, as the CUDA selection has them: 11, 11 and 10 bits.
// Softmax outputs share their sign and most exponent bits, so an 8-bit first level would leave
// nearly every score in one bin; 11 bits reach into the mantissa and the threshold bin is small.
constexpr int kMaxBins = 2048;
struct Level {
  int bits, shift;
};
constexpr Level kLevels[] = {{11, 21}, {11, 10}, {10, 0}};

// One level's histogram over `bits` bits of the key.
struct Histogram {
  int n_bins = 0;
  int32_t count[kMaxBins];
  double mass[kMaxBins];
  void clear(int bits) {
    n_bins = 1 << bits;
    std::fill(count, count + n_bins, 0);
    std::fill(mass, mass + n_bins, 0.0);
  }
};

// Where the radix descent stands: the tokens above the chosen bins so far (their key prefix
// is larger) and what they weigh.
struct Descent {
  bool by_mass = true;
  double target = 0;   // mass mode
  int32_t k = 0;       // count mode
  double acc_mass = 0;
  int32_t acc_count = 0;

  // The bin (scanning down) in which the running total crosses the target; the bins above
  // it are added to acc. In mass mode rounding can leave the target a hair out of reach of
  // this level's sums (they are not added in the order of the level above): then the
  // lowest non-empty bin is taken whole, as deeper levels will also do.
  int pick(const Histogram& h) {
    int last = -1;
    for (int b = h.n_bins - 1; b >= 0; --b) {
      if (h.count[b] == 0) continue;
      if (by_mass ? acc_mass + h.mass[b] >= target : acc_count + h.count[b] >= k) return b;
      acc_mass += h.mass[b];
      acc_count += h.count[b];
      last = b;
    }
    acc_mass -= h.mass[last];
    acc_count -= h.count[last];
    return last;
  }
};

uint32_t bin_of(float s, const Level& l) {
  return (topp_key(s) >> l.shift) & ((1u << l.bits) - 1u);
}

// The descent's histogram (one per thread; level 0 may be built ahead by the caller).
thread_local Histogram tl_hist;

void build_level0(const float* s, int32_t n, Histogram& h) {
  h.clear(kLevels[0].bits);
  for (int32_t j = 0; j < n; ++j) {
    const uint32_t b = bin_of(s[j], kLevels[0]);
    h.count[b]++;
    h.mass[b] += mass_of(s[j]);
  }
}

double total_of(const Histogram& h) {
  double t = 0;
  for (int b = 0; b < h.n_bins; ++b) t += h.mass[b];
  return t;
}

// The tokens of bin b of a level, in index order (branch-free: about half the tokens of a
// softmax row pass, so a branch would miss every other time).
void collect(const float* s, const int32_t* from, int32_t n, const Level& lv, uint32_t b, int32_t n_in,
             std::vector<int32_t>& out) {
  out.resize(static_cast<size_t>(n_in) + 1);
  int32_t c = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t j = from ? from[i] : i;
    out[c] = j;
    c += bin_of(s[j], lv) == b;
  }
  out.resize(c);
}

// The radix descent itself: mass mode (p > 0) or count mode (k). Returns count = -1 in mass
// mode when the total is zero (the caller decides). have_level0: tl_hist already holds the
// level-0 histogram of s.
TopPCut descend(const float* s, int32_t n, double p, int32_t k, TopPScratch& sc, bool have_level0 = false) {
  TopPCut cut;
  Histogram& h = tl_hist;
  if (!have_level0) build_level0(s, n, h);
  cut.total = total_of(h);
  Descent d;
  d.by_mass = p > 0;
  if (d.by_mass) {
    if (!(cut.total > 0)) {
      cut.count = -1;
      return cut;
    }
    d.target = std::min(p, 1.0) * cut.total * (1.0 - kTopPSlack);
  } else {
    d.k = k;
  }
  const uint32_t b1 = static_cast<uint32_t>(d.pick(h));
  std::vector<int32_t>& cand = sc.cand;
  collect(s, nullptr, n, kLevels[0], b1, h.count[b1], cand);
  for (size_t li = 1; li < std::size(kLevels) && cand.size() > 1; ++li) {
    const Level& lv = kLevels[li];
    h.clear(lv.bits);
    for (int32_t j : cand) {
      const uint32_t b = bin_of(s[j], lv);
      h.count[b]++;
      h.mass[b] += mass_of(s[j]);
    }
    const uint32_t b = static_cast<uint32_t>(d.pick(h));
    collect(s, cand.data(), static_cast<int32_t>(cand.size()), lv, b, h.count[b], sc.next);
    cand.swap(sc.next);
  }
  // cand: the tokens with the threshold key, all equal, in index order.
  cut.key = topp_key(s[cand.front()]);
  for (int32_t j : cand) {
    if (d.by_mass ? d.acc_mass >= d.target : d.acc_count >= d.k) break;
    d.acc_mass += mass_of(s[j]);
    d.acc_count++;
    cut.n_ties++;
  }
  cut.count = d.acc_count;
  cut.mass = d.acc_mass;
  return cut;
}

TopPCut all_or_none(const float* s, int32_t n, bool all) {
  TopPCut cut;
  for (int32_t j = 0; j < n; ++j) cut.total += mass_of(s[j]);
  if (all) {
    cut.count = n;
    cut.mass = cut.total;
    cut.key = 0;
    cut.n_ties = n;  // emit_cut takes everything when count == n
  } else {
    cut.key = std::numeric_limits<uint32_t>::max();
  }
  return cut;
}

}  // namespace

TopPCut top_k_cut(const float* score, int32_t n, int32_t k, TopPScratch& scratch) {
  n = std::max(n, 0);
  k = std::clamp(k, 0, n);
  if (k == 0 || k == n) return all_or_none(score, n, k == n && n > 0);
  return descend(score, n, 0.0, k, scratch);
}

namespace {

// top_p_cut with the share p in double (top_p_select_beyond's share is a ratio of sums).
TopPCut cut_for_share(const float* score, int32_t n, double p, int32_t min_keep, int32_t max_keep,
                      TopPScratch& scratch) {
  if (n <= 0) return TopPCut{};
  const int32_t cap = max_keep > 0 ? std::min(max_keep, n) : n;
  const int32_t floor = std::clamp(min_keep, 0, n);
  if (!(p > 0.0)) return top_k_cut(score, n, std::min(floor, cap), scratch);
  // Level 0 already bounds m: the bin where the mass crosses the target holds token m, so
  // when every m it allows is past the cap (or short of the floor) the count-mode descent
  // starts from the same histogram instead of finishing the mass descent first.
  build_level0(score, n, tl_hist);
  const double total0 = total_of(tl_hist);
  if (total0 > 0 && (cap < n || floor > 0)) {
    Descent probe;
    probe.target = std::min(p, 1.0) * total0 * (1.0 - kTopPSlack);
    const int b = probe.pick(tl_hist);
    const int32_t m_lo = probe.acc_count + 1, m_hi = probe.acc_count + tl_hist.count[b];
    const int32_t k = m_lo > cap ? cap : m_hi < floor ? std::min(floor, cap) : -1;
    if (k >= 0) {
      TopPCut cut = k == n ? all_or_none(score, n, true) : descend(score, n, 0.0, k, scratch, true);
      cut.total = total0;
      return cut;
    }
  }
  TopPCut cut = descend(score, n, p, 0, scratch, true);
  const int32_t m = cut.count < 0 ? n : cut.count;
  const int32_t want = std::min(std::max(m, floor), cap);
  if (cut.count == want) return cut;
  const double total = cut.total;
  cut = top_k_cut(score, n, want, scratch);
  cut.total = total;
  return cut;
}

}  // namespace

TopPCut top_p_cut(const float* score, int32_t n, const TopPParams& params, TopPScratch& scratch) {
  return cut_for_share(score, n, params.p, params.min_keep, params.max_keep, scratch);
}

double top_p_share_beyond(double fixed, double total, float p) {
  if (!(total > 0)) return 0.0;
  if (fixed == 0.0) return std::min(double{p}, 1.0);  // plain top-p, bit for bit
  return (std::min(double{p}, 1.0) * (fixed + total) - fixed) / total;
}

void top_p_select_beyond(const float* score, int32_t n, double fixed, const TopPParams& params,
                         std::vector<int32_t>& out, TopPScratch& scratch) {
  double total = 0;
  for (int32_t j = 0; j < n; ++j) total += mass_of(score[j]);
  const double share = top_p_share_beyond(fixed, total, params.p);
  emit_cut(score, n, cut_for_share(score, n, total > 0 ? share : params.p, params.min_keep, params.max_keep, scratch),
           out);
}

void emit_cut(const float* score, int32_t n, const TopPCut& cut, std::vector<int32_t>& out) {
  out.clear();
  if (cut.count <= 0 || n <= 0) return;
  out.reserve(cut.count);
  if (cut.count >= n) {
    for (int32_t j = 0; j < n; ++j) out.push_back(j);
    return;
  }
  // Branch-free: a selected token is written and counted, any other overwritten.
  out.resize(static_cast<size_t>(cut.count) + 1);
  int32_t c = 0, ties = 0;
  for (int32_t j = 0; j < n; ++j) {
    const uint32_t u = topp_key(score[j]);
    const bool tie = u == cut.key;
    out[c] = j;
    c += (u > cut.key) | (tie & (ties < cut.n_ties));
    ties += tie;
  }
  out.resize(c);
}

void top_p_select(const float* score, int32_t n, const TopPParams& params, std::vector<int32_t>& out,
                  TopPScratch& scratch) {
  emit_cut(score, n, top_p_cut(score, n, params, scratch), out);
}

std::vector<int32_t> top_p_select(std::span<const float> score, const TopPParams& params) {
  TopPScratch sc;
  std::vector<int32_t> out;
  top_p_select(score.data(), static_cast<int32_t>(score.size()), params, out, sc);
  return out;
}

void top_p_select_logits(const float* logits, int32_t n, float scale, const TopPParams& params,
                         std::vector<int32_t>& out, TopPScratch& scratch) {
  scratch.mass.resize(std::max(n, 0));
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j < n; ++j) {
    scratch.mass[j] = scale * logits[j];
    m = std::max(m, scratch.mass[j]);
  }
  exp_shift_sum(scratch.mass.data(), n, m);  // the attention's vectorised exp(x - m)
  top_p_select(scratch.mass.data(), n, params, out, scratch);
}

}  // namespace sieve

#include "sparse/topp.h"

#include "backend/cpu/attention.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <numeric>

namespace sieve {

namespace {

inline double mass_of(float s) {
  return s > 0.0f ? static_cast<double>(s) : 0.0;
}

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
  double target = 0;
  double acc_mass = 0;
  int32_t acc_count = 0;

  // The bin (scanning down) in which the running mass crosses the target; the bins above it
  // are added to acc. Rounding can leave the target a hair out of reach of this level's sums
  // (they are not added in the order of the level above): then the lowest non-empty bin is
  // taken whole, as deeper levels will also do.
  int pick(const Histogram& h) {
    int last = -1;
    for (int b = h.n_bins - 1; b >= 0; --b) {
      if (h.count[b] == 0) continue;
      if (acc_mass + h.mass[b] >= target) return b;
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
void collect(const float* s, const int32_t* from, int32_t n, const Level& lv, uint32_t b,
             int32_t n_in, std::vector<int32_t>& out) {
  out.resize(static_cast<size_t>(n_in) + 1);
  int32_t* o = out.data();
  int32_t c = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t j = from ? from[i] : i;
    o[c] = j;
    c += bin_of(s[j], lv) == b;
  }
  out.resize(c);
}

// The radix descent by mass (p > 0). Returns count = -1 when the total is zero (the caller
// decides). tl_hist holds the level-0 histogram of s on entry.
TopPCut descend(const float* s, int32_t n, double p, TopPScratch& sc) {
  TopPCut cut;
  Histogram& h = tl_hist;
  cut.total = total_of(h);
  if (!(cut.total > 0)) {
    cut.count = -1;
    return cut;
  }
  Descent d;
  d.target = std::min(p, 1.0) * cut.total * (1.0 - kTopPSlack);
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
    if (d.acc_mass >= d.target) break;
    d.acc_mass += mass_of(s[j]);
    d.acc_count++;
    cut.n_ties++;
  }
  cut.count = d.acc_count;
  cut.mass = d.acc_mass;
  return cut;
}

// The descent by count (0 < k < n), over the keys themselves: a histogram of the top 11 bits
// finds the bin holding the k-th value; one pass then splits the indices into those of higher
// bins (all in: sc.next[0..*n_higher)) and those of that bin (the candidates); the next 11
// and 10 bits, histogrammed over the candidates alone, give the exact k-th key and how many
// keys equal to it are in. The chosen candidates, in index order, end in sc.cand[0..*n_pick).
// Two passes over n. (A decode miss picks 2,048 of ~16K soft-vote scores, which crowd a few
// bins: the histogram counts into four interleaved copies so that consecutive increments of
// one bin do not wait on each other, and the split writes both ways without a branch.)
TopPCut count_descent(const float* v, int32_t n, int32_t k, TopPScratch& sc, int32_t* n_higher,
                      int32_t* n_pick) {
  constexpr int kShift0 = kLevels[0].shift, kBins = 1 << kLevels[0].bits, kCopies = 4;
  thread_local std::vector<int32_t> hist4;
  sc.key.resize(n);
  hist4.assign(static_cast<size_t>(kCopies) * kBins, 0);
  uint32_t* kp = sc.key.data();
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
    in_bin = h[bin] + h[kBins + bin] + h[2 * kBins + bin] + h[3 * kBins + bin];
    if (above + in_bin >= k) break;
    above += in_bin;
  }
  sc.next.resize(static_cast<size_t>(above) + 1);
  sc.cand.resize(static_cast<size_t>(in_bin) + 1);
  int32_t* higher = sc.next.data();
  int32_t* cand = sc.cand.data();
  int32_t nh = 0, nc = 0;
  for (j = 0; j < n; ++j) {
    const uint32_t b = kp[j] >> kShift0;
    higher[nh] = j;
    nh += b > static_cast<uint32_t>(bin);
    cand[nc] = j;
    nc += b == static_cast<uint32_t>(bin);
  }
  // The exact k-th key inside the bin: the next levels' bits among the keys sharing the bits
  // chosen so far.
  int32_t need = k - above;
  uint32_t t = static_cast<uint32_t>(bin) << kShift0;
  int32_t hist[kMaxBins];
  for (size_t li = 1; li < std::size(kLevels); ++li) {
    const auto [bits, shift] = kLevels[li];
    const uint32_t mask = (1u << bits) - 1u,
                   prefix_mask = ~((mask << shift) | ((1u << shift) - 1u));
    std::fill(hist, hist + (1 << bits), 0);
    for (int32_t i = 0; i < nc; ++i) {
      const uint32_t u = kp[cand[i]];
      if ((u & prefix_mask) == t) hist[(u >> shift) & mask]++;
    }
    int32_t b = static_cast<int32_t>(mask);
    for (; b > 0 && hist[b] < need; --b) need -= hist[b];
    t |= static_cast<uint32_t>(b) << shift;
  }
  // Keys above t are in, and the first `need` keys equal to t.
  int32_t np = 0, ties = 0;
  for (int32_t i = 0; i < nc; ++i) {
    const int32_t c = cand[i];
    const bool tie = kp[c] == t;
    cand[np] = c;
    np += (kp[c] > t) | (tie & (ties < need));
    ties += tie;
  }
  *n_higher = nh;
  *n_pick = np;
  TopPCut cut;
  cut.key = t;
  cut.n_ties = need;
  cut.count = k;
  return cut;
}

}  // namespace

TopPCut top_k_cut(const float* score, int32_t n, int32_t k, TopPScratch& scratch) {
  n = std::max(n, 0);
  k = std::clamp(k, 0, n);
  if (k == 0 || k == n) {
    TopPCut cut;
    cut.count = k;
    cut.n_ties = k;  // all: emit_cut takes everything when count == n
    cut.key = k == 0 ? std::numeric_limits<uint32_t>::max() : 0;
    return cut;
  }
  int32_t n_higher = 0, n_pick = 0;
  return count_descent(score, n, k, scratch, &n_higher, &n_pick);
}

void top_k_select(const float* score, int32_t n, int32_t k, std::vector<int32_t>& out,
                  TopPScratch& scratch) {
  n = std::max(n, 0);
  k = std::clamp(k, 0, n);
  out.resize(k);
  if (k == 0) return;
  if (k == n) {
    std::iota(out.begin(), out.end(), 0);
    return;
  }
  int32_t n_higher = 0, n_pick = 0;
  count_descent(score, n, k, scratch, &n_higher, &n_pick);
  std::merge(scratch.next.begin(), scratch.next.begin() + n_higher, scratch.cand.begin(),
             scratch.cand.begin() + n_pick, out.begin());
}

namespace {

// The top-k cut with the set's mass, for top-p's floor and cap (total: the row's, which the
// caller has already summed).
TopPCut weighed_top_k_cut(const float* score, int32_t n, int32_t k, double total,
                          TopPScratch& scratch) {
  k = std::clamp(k, 0, n);
  if (k == 0 || k == n) {
    TopPCut cut = top_k_cut(score, n, k, scratch);
    cut.mass = k == n ? total : 0.0;
    cut.total = total;
    return cut;
  }
  int32_t n_higher = 0, n_pick = 0;
  TopPCut cut = count_descent(score, n, k, scratch, &n_higher, &n_pick);
  for (int32_t i = 0; i < n_higher; ++i) cut.mass += mass_of(score[scratch.next[i]]);
  for (int32_t i = 0; i < n_pick; ++i) cut.mass += mass_of(score[scratch.cand[i]]);
  cut.total = total;
  return cut;
}

// top_p_cut with the share p in double (top_p_select_beyond's share is a ratio of sums).
TopPCut cut_for_share(const float* score, int32_t n, double p, int32_t min_keep, int32_t max_keep,
                      TopPScratch& scratch) {
  if (n <= 0) return TopPCut{};
  const int32_t cap = max_keep > 0 ? std::min(max_keep, n) : n;
  const int32_t floor = std::clamp(min_keep, 0, n);
  if (!(p > 0.0)) {
    double total = 0;
    for (int32_t j = 0; j < n; ++j) total += mass_of(score[j]);
    return weighed_top_k_cut(score, n, std::min(floor, cap), total, scratch);
  }
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
    if (k >= 0) return weighed_top_k_cut(score, n, k, total0, scratch);
  }
  TopPCut cut = descend(score, n, p, scratch);
  const int32_t m = cut.count < 0 ? n : cut.count;
  const int32_t want = std::min(std::max(m, floor), cap);
  if (cut.count == want) return cut;
  return weighed_top_k_cut(score, n, want, cut.total, scratch);
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
  emit_cut(score, n,
           cut_for_share(score, n, total > 0 ? share : params.p, params.min_keep, params.max_keep,
                         scratch),
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
  // (The cut's fields are copied first: the int stores through `o` could alias them.)
  out.resize(static_cast<size_t>(cut.count) + 1);
  const uint32_t key = cut.key;
  const int32_t n_ties = cut.n_ties;
  int32_t* o = out.data();
  int32_t c = 0, ties = 0;
  for (int32_t j = 0; j < n; ++j) {
    const uint32_t u = topp_key(score[j]);
    const bool tie = u == key;
    o[c] = j;
    c += (u > key) | (tie & (ties < n_ties));
    ties += tie;
  }
  out.resize(c);
}

void top_p_select(const float* score, int32_t n, const TopPParams& params,
                  std::vector<int32_t>& out, TopPScratch& scratch) {
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

// Sort-free top-p (RTPurbo's dynamic budget): the smallest set of tokens whose mass reaches
// a share p of the total, found by radix descent over the order-preserving bits of the
// float scores instead of sorting them.
//
// Level 1 is one pass over all n scores that fills a 2048-bin histogram (count and mass per
// bin) of the top 11 bits of the monotone uint32 image of each float; a scan from the top bin
// down finds the bin in which the cumulative mass crosses the target. Every token of a higher
// bin is in. A second pass collects the tokens of that bin, and levels 2 and 3 repeat the
// histogram on the next 11 and 10 bits over those candidates only (the CUDA selection's
// 11/11/10 split; 8-bit levels left softmax outputs, which share their sign and most exponent
// bits, nearly all in one first-level bin). After the 3rd level the remaining
// candidates have bitwise equal scores and are taken in index order, so the result is the
// EXACT minimal set (not only up to a bin's granularity) with ties broken towards the lower
// index - the same set as sorting by (score desc, index asc) and taking a prefix. A last pass
// emits the indices in ascending order. Cost: three passes over n plus passes over the
// threshold bin's candidates (usually a small fraction); no sort, O(2048) memory per level.
//
// Top-k (top_k_cut, top_k_select; also the top-p floor and cap) is the same descent by count
// over precomputed keys: level 1 counts into interleaved histograms, one pass splits the
// indices into the higher bins' and the threshold bin's, and the set is those two lists merged.
//
// Definitions shared with the sort-based reference (topp_test.cpp) and pick_tokens:
//   mass(j)  = max(score[j], 0)        (negative scores and -0 weigh nothing; NaN is not allowed)
//   total    = sum_j mass(j)           (double)
//   target   = p * total * (1 - kTopPSlack)  (the slack absorbs float rounding of sums, so
//              that p = 1 does not chase the last ulp)
//   m        = the smallest count whose top-m mass >= target
//   returned = top-min(max(m, min_keep), cap) in (score desc, index asc) order, where
//              cap = max_keep > 0 ? max_keep : n. With total == 0 (nothing to rank by mass)
//              m is taken as n, i.e. the cap decides.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace sieve {

inline constexpr double kTopPSlack = 1e-6;

struct TopPParams {
  float p = 0.9f;        // share of the total mass to reach, (0, 1]
  int32_t min_keep = 0;  // floor on the count (top-min_keep is always in)
  int32_t max_keep = 0;  // budget cap on the count; 0: none
};

// The selected set, described by its cut in the order of the monotone keys: every token
// whose key is > `key`, plus the first `n_ties` tokens (in index order) whose key == key.
struct TopPCut {
  uint32_t key = 0;
  int32_t n_ties = 0;
  int32_t count = 0;  // size of the set
  double mass = 0;    // mass of the set
  double total = 0;   // mass of all n tokens
};

// Monotone image of a float: a < b  <=>  topp_key(a) < topp_key(b) (non-NaN; -0 maps as +0).
// Inline: the selections call it once per score in their histogram and split passes.
inline uint32_t topp_key(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f) & (f == 0.0f ? 0u : ~0u);  // -0 ranks with +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Reusable buffers: a caller that selects every step keeps one and allocates nothing.
struct TopPScratch {
  std::vector<int32_t> cand, next;
  std::vector<uint32_t> key;  // top-k: the monotone keys of the row
  std::vector<float> mass;    // top_p_select_logits: the unnormalised softmax
};

// The cut of the top-p set of score[0..n) (see the definitions above).
TopPCut top_p_cut(const float* score, int32_t n, const TopPParams& params, TopPScratch& scratch);
// The cut of the exact top-k (k clamped to [0, n]; ties to the lower index). The descent by
// count works on the keys alone: mass and total are left 0.
TopPCut top_k_cut(const float* score, int32_t n, int32_t k, TopPScratch& scratch);
// Ascending indices of that top-k (the descent's split lists merged: no pass to emit).
void top_k_select(const float* score, int32_t n, int32_t k, std::vector<int32_t>& out,
                  TopPScratch& scratch);
// Ascending indices of the set described by cut (one pass).
void emit_cut(const float* score, int32_t n, const TopPCut& cut, std::vector<int32_t>& out);

// Ascending indices of the top-p set of score[0..n) (non-negative masses: probabilities or
// any unnormalised weights).
void top_p_select(const float* score, int32_t n, const TopPParams& params,
                  std::vector<int32_t>& out, TopPScratch& scratch);
std::vector<int32_t> top_p_select(std::span<const float> score, const TopPParams& params);

// Top-p of candidates beside tokens that are kept anyway (RTPurbo's decode with the sinks and
// window counted: they are read whatever is picked, so their mass counts toward p). `fixed`
// is the kept tokens' mass on the scale of score's masses. The set is the top-m of score with
// m the smallest count whose mass reaches share * total * (1 - kTopPSlack), where total is
// score's mass and share = top_p_share_beyond(fixed, total, p) = (p (fixed + total) - fixed) /
// total; a share <= 0 (the kept tokens hold p already) keeps only the floor. Floor and cap as
// in top_p_select; with total == 0 the cap decides.
double top_p_share_beyond(double fixed, double total, float p);
void top_p_select_beyond(const float* score, int32_t n, double fixed, const TopPParams& params,
                         std::vector<int32_t>& out, TopPScratch& scratch);

// The same over softmax(scale * logits): masses exp(scale * (l - max)) go to scratch.mass
// (normalising is unnecessary: the target is relative to the total).
void top_p_select_logits(const float* logits, int32_t n, float scale, const TopPParams& params,
                         std::vector<int32_t>& out, TopPScratch& scratch);

}  // namespace sieve

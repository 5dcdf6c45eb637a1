// Softmax attention of query rows over a KV head stored in pages of f16 rows, on the CPU.
// The same call serves dense attention (all keys), sliding windows, and sparse attention
// over an index list; partial results over disjoint key sets merge exactly through their
// (o, max, sum) states, so split-K decode and sink + window + selected parts compose.
#pragma once

#include <cstdint>
#include <vector>

namespace sieve {

// One KV head of one layer of one sequence, read in place from its pages. Token j lives in
// page j / page_size at offset j % page_size: its K row is
// k_pages[j / page_size] + head_off + (j % page_size) * row_stride (likewise V), its original
// position pos_pages[j / page_size][j % page_size]. Positions ascend with j (eviction keeps
// order). The KV heads of one stream share its page tables and differ in head_off.
struct KvHeadView {
  const uint16_t* const* k_pages = nullptr;  // [n_pages] -> f16 rows of the page
  const uint16_t* const* v_pages = nullptr;
  const int32_t* const* pos_pages = nullptr;  // [n_pages] -> positions; nullptr: pos = j
  int32_t page_size = 1;
  int64_t row_stride = 0;
  int32_t n_tokens = 0;
  int64_t head_off = 0;  // elements from a row's start to this head's values

  const uint16_t* k_row(int32_t j) const {
    return k_pages[j / page_size] + head_off + (j % page_size) * row_stride;
  }
  const uint16_t* v_row(int32_t j) const {
    return v_pages[j / page_size] + head_off + (j % page_size) * row_stride;
  }
  int32_t position(int32_t j) const {
    return pos_pages ? pos_pages[j / page_size][j % page_size] : j;
  }
};

// Keys are reduced in segments of this many (positions in the key set, from its start);
// callers whose split must equal the whole bit for bit cut at multiples of it (see attend()).
constexpr int32_t kAttnSegment = 512;

struct AttnQuery {
  const float* q = nullptr;        // [n_q, n_group, head_dim] the query rows of one KV group
  const int32_t* q_pos = nullptr;  // [n_q] positions, ascending
  int32_t n_q = 0;
  int32_t n_group = 1;  // query heads sharing this KV head
  int32_t head_dim = 0;
  float scale = 1.0f;
  int32_t window = 0;  // > 0: key visible iff 0 <= q_pos - k_pos < window
  int32_t n_sink = 0;  // with window > 0: keys at positions < n_sink stay visible
};

class RopeRotator;

// Which keys to read: an ascending index list, or the range [begin, end) when idx == nullptr.
// Compact positions (rot != nullptr; TokenSelect past the trained window): the c-th key of the
// set takes position pos_base + c, and its K (stored rotated at its original position) is
// re-rotated to that position while the tile is gathered.
// Kept rows (keep_rows): with n_kept > 0 the first n_kept keys of the set are read from
// contiguous f16 rows, kept_k / kept_v + c * head_dim, already rotated to the positions they are
// attended at (a reused selection's copy: sequential reads, no re-rotation; their positions
// still come from idx and the store, or pos_base + c). With `fill`, attend() writes those rows
// there instead as it reads them from the store (K re-rotated, then rounded to f16): the step
// that makes a selection leaves its copy behind at no extra read.
// A tile whose keys all need the same rotation (consecutive tokens: the window, a dense run of
// picks) is read as stored and the query is turned the other way instead.
// With `fixed`, every key takes position pos_base instead (selection scores free of RoPE
// distances: pos_base 0 and a query at position 0 give the pre-RoPE dot products TokenSelect's
// public code ranks by).
// The rotator must have reserved every offset (RopeRotator::reserve).
struct KeySet {
  const int32_t* idx = nullptr;
  int32_t n_idx = 0;
  int32_t begin = 0;
  int32_t end = 0;
  const RopeRotator* rot = nullptr;
  int32_t pos_base = 0;
  bool fixed = false;
  uint16_t* kept_k = nullptr;
  uint16_t* kept_v = nullptr;
  int32_t n_kept = 0;
  bool fill = false;

  int32_t size() const { return idx ? n_idx : end - begin; }  // keys in the set
};

// o[r, :] = sum_j softmax_j(scale * q_r . k_j) v_j over the visible keys of `keys`
// (causal: k_pos <= q_pos). With m_out/l_out given, o is left unnormalised and the
// running max and sum per row are written ([n_q * n_group] each) for merge_attn();
// otherwise o is normalised (rows with no visible key are zero).
void attend(const AttnQuery& q, const KvHeadView& kv, const KeySet& keys, float* o,
            float* m_out = nullptr, float* l_out = nullptr);

// Split-K of one decode row (q.n_q == 1) over the keys [0, n_keys) under its window and sinks:
// the first set holds the sinks and the window up to the first segment boundary past the
// window's start, each further set one segment, up to the last visible key. Their partial
// states merged in order equal attend() over KeySet{nullptr, 0, 0, n_keys} bit for bit (the
// same tiles, reduced in the same segments); keys before the window are not visited.
void window_segments(const AttnQuery& q, const KvHeadView& kv, int32_t n_keys,
                     std::vector<KeySet>& out);

// Folds partial state (o_b, m_b, l_b) into (o_a, m_a, l_a) for n_rows rows of head_dim.
void merge_attn(float* o_a, float* m_a, float* l_a, const float* o_b, const float* m_b,
                const float* l_b, int64_t n_rows, int32_t head_dim);
// o[r] /= l[r] (zero when l[r] == 0).
void normalize_attn(float* o, const float* l, int64_t n_rows, int32_t head_dim);

// Scores for selection: s[g * ld + t] = scale * q_g . k_j for the t-th key j of `keys` and
// the G rows of q ([G, head_dim]); no causal mask (the caller passes past keys only).
void key_scores(const float* q, int32_t n_group, int32_t head_dim, float scale,
                const KvHeadView& kv, const KeySet& keys, float* s, int64_t ld);
// s[t] = scale * q . k[t * stride, + d) for t < n: rows of d floats at a fixed stride (the
// sketch or indexer keys of one KV head over consecutive tokens of a page). Vectorised where
// the CPU allows; a score is formed the same way wherever its key falls in the range (a last
// partial block of 8 runs through a padded copy), so it never depends on how a caller cut
// its keys into ranges.
void strided_scores(const float* q, const float* k, int64_t stride, int n, int d, float scale,
                    float* s);
// s[i] = exp(s[i] - m) for i < n; returns the sum (vectorised where the CPU allows).
double exp_shift_sum(float* s, int64_t n, float m);

// Double-precision reference of attend() (tests): normalised output.
void attend_ref(const AttnQuery& q, const KvHeadView& kv, const KeySet& keys, float* o);

}  // namespace sieve

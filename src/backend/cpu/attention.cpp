#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/simd_avx2.h"
#include "core/cpu_features.h"

namespace sieve {
namespace {

constexpr int kTile = 32;  // keys converted to f32 at once, shared by a block of rows
static_assert(kAttnSegment % kTile == 0, "segment boundaries fall between tiles");
constexpr int kBlockRows = 16;  // query rows (tokens x heads of the group) per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// s[t] = scale * dot(q, k[t]) for t < n.
void tile_scores_ref(const float* q, const float* k, int n, int d, float scale, float* s) {
  for (int t = 0; t < n; ++t) s[t] = scale * dot_f32(q, k + t * d, d);
}
// s[t] = exp(s[t] - m) (0 for -inf); returns the sum.
float tile_exp_ref(float* s, int n, float m) {
  float sum = 0;
  for (int t = 0; t < n; ++t) {
    s[t] = s[t] == kNegInf ? 0.0f : std::exp(s[t] - m);
    sum += s[t];
  }
  return sum;
}
float tile_max_ref(const float* s, int n) {
  float m = kNegInf;
  for (int t = 0; t < n; ++t) m = std::max(m, s[t]);
  return m;
}
// o = o * alpha + sum_t p[t] * v[t]
void tile_accum_ref(const float* p, const float* v, int n, int d, float alpha, float* o) {
  for (int i = 0; i < d; ++i) o[i] *= alpha;
  for (int t = 0; t < n; ++t) {
    if (p[t] != 0.0f) axpy(p[t], v + t * d, o, d);
  }
}

#if defined(__x86_64__)
SIEVE_AVX2 inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// Scores for 8 keys at once: one accumulator per key over the head dimension, then a
// transposing reduction tree gives the 8 dot products in one vector. Every key's sum is formed
// in the same order whatever its slot, and a partial block (n % 8) runs the same code on the
// tile's padding rows (the caller's tile buffer holds kTile rows), so a score never depends on
// how the key range was cut.
// (Rows `stride` floats apart; the tile's rows are d apart.)
SIEVE_AVX2 inline __m256 dot8(const float* q, const float* k, int d, int64_t stride) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int i = 0; i < d; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 0 * stride + i), a0);
    a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 1 * stride + i), a1);
    a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * stride + i), a2);
    a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * stride + i), a3);
    a4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 4 * stride + i), a4);
    a5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 5 * stride + i), a5);
    a6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 6 * stride + i), a6);
    a7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 7 * stride + i), a7);
  }
  const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
}

SIEVE_AVX2 void tile_scores_avx2(const float* q, const float* k, int n, int d, float scale,
                                 float* s) {
  if (d % 8 != 0) return tile_scores_ref(q, k, n, d, scale, s);
  const __m256 vs = _mm256_set1_ps(scale);
  int t = 0;
  for (; t + 8 <= n; t += 8) _mm256_storeu_ps(s + t, _mm256_mul_ps(dot8(q, k + t * d, d, d), vs));
  if (t < n) {
    alignas(32) float tail[8];
    _mm256_store_ps(tail, _mm256_mul_ps(dot8(q, k + t * d, d, d), vs));
    for (int i = 0; t + i < n; ++i) s[t + i] = tail[i];
  }
}

SIEVE_AVX2 void strided_scores_avx2(const float* q, const float* k, int64_t stride, int n, int d,
                                    float scale, float* s) {
  const __m256 vs = _mm256_set1_ps(scale);
  int t = 0;
  for (; t + 8 <= n; t += 8)
    _mm256_storeu_ps(s + t, _mm256_mul_ps(dot8(q, k + t * stride, d, stride), vs));
  if (t < n) {  // the rows past n are not there to read: pad a copy
    thread_local std::vector<float> pad;
    pad.assign(static_cast<size_t>(8) * d, 0.0f);
    for (int i = 0; t + i < n; ++i)
      std::copy(k + (t + i) * stride, k + (t + i) * stride + d, pad.begin() + i * d);
    alignas(32) float tail[8];
    _mm256_store_ps(tail, _mm256_mul_ps(dot8(q, pad.data(), d, d), vs));
    for (int i = 0; t + i < n; ++i) s[t + i] = tail[i];
  }
}

SIEVE_AVX2 float tile_max_avx2(const float* s, int n) {
  __m256 m = _mm256_set1_ps(kNegInf);
  int t = 0;
  for (; t + 8 <= n; t += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + t));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float r = _mm_cvtss_f32(h);
  for (; t < n; ++t) r = std::max(r, s[t]);
  return r;
}

SIEVE_AVX2 float tile_exp_avx2(float* s, int n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 p = simd::exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
    _mm256_storeu_ps(s + t, p);
    acc = _mm256_add_ps(acc, p);
  }
  // The tail goes through the same vector exp on a padded copy (padding -inf gives 0), so an
  // element's value and the lane it is summed in never depend on the tile's length: a query
  // row gets bitwise the same result whichever query block (prefill chunk split) it is in.
  if (t < n) {
    alignas(32) float tail[8];
    for (int i = 0; i < 8; ++i) tail[i] = t + i < n ? s[t + i] : kNegInf;
    const __m256 p = simd::exp_neg(_mm256_sub_ps(_mm256_load_ps(tail), vm));
    _mm256_store_ps(tail, p);
    for (int i = 0; t + i < n; ++i) s[t + i] = tail[i];
    acc = _mm256_add_ps(acc, p);
  }
  return hsum(acc);
}

// o = o * alpha + sum_t p[t] v[t], 64 columns at a time held in registers: the keys' FMAs
// into 8 independent accumulators (t ascending for every column, whatever the tile length).
SIEVE_AVX2 void tile_accum_avx2(const float* p, const float* v, int n, int d, float alpha,
                                float* o) {
  if (d % 64 != 0) {
    if (d % 8 != 0) return tile_accum_ref(p, v, n, d, alpha, o);
    const __m256 va = _mm256_set1_ps(alpha);
    for (int i = 0; i < d; i += 8) {
      __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(o + i), va);
      for (int t = 0; t < n; ++t)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), _mm256_loadu_ps(v + t * d + i), acc);
      _mm256_storeu_ps(o + i, acc);
    }
    return;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  for (int i = 0; i < d; i += 64) {
    __m256 c[8];
    for (int u = 0; u < 8; ++u) c[u] = _mm256_mul_ps(_mm256_loadu_ps(o + i + 8 * u), va);
    for (int t = 0; t < n; ++t) {
      const __m256 pt = _mm256_set1_ps(p[t]);
      const float* vr = v + t * d + i;
      for (int u = 0; u < 8; ++u) c[u] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(vr + 8 * u), c[u]);
    }
    for (int u = 0; u < 8; ++u) _mm256_storeu_ps(o + i + 8 * u, c[u]);
  }
}
#endif

struct Kernels {
  void (*scores)(const float*, const float*, int, int, float, float*);
  float (*exp)(float*, int, float);
  void (*accum)(const float*, const float*, int, int, float, float*);
  float (*max)(const float*, int);
};

const Kernels& kernels() {
  static const Kernels k = [] {
#if defined(__x86_64__)
    if (use_avx2()) return Kernels{tile_scores_avx2, tile_exp_avx2, tile_accum_avx2, tile_max_avx2};
#endif
    return Kernels{tile_scores_ref, tile_exp_ref, tile_accum_ref, tile_max_ref};
  }();
  return k;
}

// Number of key-set entries whose position is < p (positions ascend along the set).
int32_t lower_bound_pos(const KvHeadView& kv, const KeySet& ks, int32_t p) {
  int32_t lo = 0, hi = ks.size();
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    const int32_t j = ks.idx ? ks.idx[mid] : ks.begin + mid;
    const int32_t pos = ks.rot ? ks.pos_base + mid : kv.position(j);
    if (pos < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// Copies the K and V rows (f16 -> f32) and positions of keys c0..c0+n of the key set into a
// tile, and prefetches the next tile's rows. Pages of a power-of-two size (the KV store's) are
// found by shift and mask instead of a division per key.
struct TileGather {
  const KvHeadView& kv;
  const KeySet& keys;
  int d;
  int32_t n_keys;
  int shift = -1;
  int32_t mask = 0;
  bool avx2;
  TileGather(const KvHeadView& kv_, const KeySet& keys_, int d_)
      : kv(kv_), keys(keys_), d(d_), n_keys(keys_.size()) {
    const int32_t ps = kv.page_size;
    if (ps > 0 && (ps & (ps - 1)) == 0) {
      shift = __builtin_ctz(static_cast<unsigned>(ps));
      mask = ps - 1;
    }
#if defined(__x86_64__)
    avx2 = use_avx2() && d % 8 == 0;
#else
    avx2 = false;
#endif
  }
  int32_t key(int32_t c) const {
    return keys.idx ? keys.idx[c] : keys.begin + c;
  }
  // Page and offset of the c-th key of the set.
  void locate(int32_t c, int32_t& page, int32_t& off) const {
    const int32_t j = key(c);
    if (shift >= 0) {
      page = j >> shift;
      off = j & mask;
    } else {
      page = j / kv.page_size;
      off = j - page * kv.page_size;
    }
  }
  // The c-th key of the set (slot t of the tile, at page/off): its rotation offset for compact
  // positions (pos_base + c - stored position; with `fixed`, pos_base - stored position) and
  // the position the attention sees.
  void note_key(int32_t c, int t, int32_t page, int32_t off, int64_t* offs, int32_t* kpos) const {
    const int32_t stored = kv.pos_pages ? kv.pos_pages[page][off] : key(c);
    const int32_t target = keys.pos_base + (keys.fixed ? 0 : c);
    offs[t] = int64_t{target} - stored;
    if (kpos) kpos[t] = keys.rot ? target : stored;
  }
  // Compact positions: every key of the tile is re-rotated by (pos_base + c - stored). A run of
  // keys with one offset (consecutive tokens: the window, the sinks, a dense stretch of picks)
  // takes one rotate() call, so cos/sin are formed once per run, and offset 0 (the sinks) is
  // skipped. With `uniform` given and every key of the tile at one offset, nothing is rotated:
  // *uniform gets the offset and the caller turns the query by -offset instead (G rows rather
  // than n keys); otherwise *uniform is 0.
  // With `near` given (selection scores): when every key's offset lies within
  // RopeRotator::kNear of the first's, *near gets the first's offset and each key turns only
  // by its distance from it (RopeRotator::rotate_near); the caller turns the query by -*near.
  void rotate_tile(int n, const int64_t* offs, float* kt, int64_t* uniform,
                   int64_t* near = nullptr) const {
    if (uniform) *uniform = 0;
    if (near) *near = 0;
    if (!keys.rot) return;
    if (uniform && std::all_of(offs, offs + n, [&](int64_t o) { return o == offs[0]; })) {
      *uniform = offs[0];
      return;
    }
    if (near && std::all_of(offs, offs + n, [&](int64_t o) {
          return o - offs[0] < RopeRotator::kNear && offs[0] - o < RopeRotator::kNear;
        })) {
      int64_t delta[kTile];
      for (int t = 0; t < n; ++t) delta[t] = offs[t] - offs[0];
      keys.rot->rotate_near(kt, n, d, delta);
      *near = offs[0];
      return;
    }
    for (int t = 0; t < n;) {
      int e = t + 1;
      while (e < n && offs[e] == offs[t]) ++e;
      if (offs[t] != 0) keys.rot->rotate(kt + t * d, e - t, offs[t]);
      t = e;
    }
  }
  // A kept row (c < keys.n_kept, read from the contiguous copy): already at its attention
  // position (offset 0).
  void note_kept(int32_t c, int t, int64_t* offs, int32_t* kpos) const {
    offs[t] = 0;
    if (kpos) kpos[t] = keys.rot ? keys.pos_base + c : kv.position(key(c));
  }
  void operator()(int32_t c0, int n, float* kt, float* vt, int32_t* kpos,
                  int64_t* uniform = nullptr, int64_t* near = nullptr) const {
    int64_t offs[kTile];
#if defined(__x86_64__)
    if (avx2) {
      gather_avx2(c0, n, kt, vt, kpos, offs);
      return rotate_tile(n, offs, kt, uniform, near);
    }
#endif
    for (int t = 0; t < n; ++t) {
      if (c0 + t < keys.n_kept && !keys.fill) {
        const int64_t row = int64_t{c0 + t} * d;
        f16_to_f32_row(keys.kept_k + row, kt + t * d, d);
        if (vt) f16_to_f32_row(keys.kept_v + row, vt + t * d, d);
        note_kept(c0 + t, t, offs, kpos);
        continue;
      }
      int32_t page, off;
      locate(c0 + t, page, off);
      const int64_t row = kv.head_off + off * kv.row_stride;
      f16_to_f32_row(kv.k_pages[page] + row, kt + t * d, d);
      if (vt) f16_to_f32_row(kv.v_pages[page] + row, vt + t * d, d);
      note_key(c0 + t, t, page, off, offs, kpos);
    }
    rotate_tile(n, offs, kt, uniform, near);
  }
#if defined(__x86_64__)
  SIEVE_AVX2 void gather_avx2(int32_t c0, int n, float* kt, float* vt, int32_t* kpos,
                              int64_t* offs) const {
    const int32_t c_end = std::min(n_keys, c0 + n + kTile);
    int t = 0;
    const int32_t n_read = keys.fill ? 0 : keys.n_kept;
    for (; t < n && c0 + t < n_read; ++t) {  // kept rows: contiguous, prefetched by the hardware
      const int32_t c = c0 + t;
      row_avx2(keys.kept_k + int64_t{c} * d, kt + t * d);
      if (vt) row_avx2(keys.kept_v + int64_t{c} * d, vt + t * d);
      note_kept(c, t, offs, kpos);
    }
    for (; t < n; ++t) {
      const int32_t c = c0 + t;
      if (c + kTile < c_end && c + kTile >= n_read) {  // the same slot of the next tile
        int32_t pp, po;
        locate(c + kTile, pp, po);
        const int64_t prow = kv.head_off + po * kv.row_stride;
        for (int i = 0; i < d; i += 32) {
          _mm_prefetch(reinterpret_cast<const char*>(kv.k_pages[pp] + prow + i), _MM_HINT_T0);
          if (vt)
            _mm_prefetch(reinterpret_cast<const char*>(kv.v_pages[pp] + prow + i), _MM_HINT_T0);
        }
      }
      int32_t page, off;
      locate(c, page, off);
      const int64_t row = kv.head_off + off * kv.row_stride;
      row_avx2(kv.k_pages[page] + row, kt + t * d);
      if (vt) row_avx2(kv.v_pages[page] + row, vt + t * d);
      note_key(c, t, page, off, offs, kpos);
    }
  }
  // One f16 row of d values (d % 8 == 0) to f32.
  SIEVE_AVX2 void row_avx2(const uint16_t* src, float* dst) const {
    for (int i = 0; i < d; i += 8) {
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
  }
#endif
};

}  // namespace

void attend(const AttnQuery& q, const KvHeadView& kv, const KeySet& keys, float* o, float* m_out,
            float* l_out) {
  const Kernels& K = kernels();
  const int d = q.head_dim;
  const int G = q.n_group;
  const int64_t n_rows = static_cast<int64_t>(q.n_q) * G;
  thread_local std::vector<float> kt, vt, s, ms, ls;
  kt.resize(static_cast<size_t>(kTile) * d);
  vt.resize(static_cast<size_t>(kTile) * d);
  s.resize(kTile);
  float* m = m_out;
  float* l = l_out;
  if (!m) {
    ms.resize(n_rows);
    ls.resize(n_rows);
    m = ms.data();
    l = ls.data();
  }
  std::fill(o, o + n_rows * d, 0.0f);
  std::fill(m, m + n_rows, kNegInf);
  std::fill(l, l + n_rows, 0.0f);

  // Keys are visited in tiles aligned to multiples of kTile of the key set, grouped into
  // segments of kAttnSegment keys: each segment's softmax state starts fresh and is merged
  // into the row's state in order. Split-K callers give each task whole segments and merge
  // them in the same order, so a row's result is bitwise the same on either path.
  thread_local std::vector<float> so, sm, sl, qt;
  so.resize(static_cast<size_t>(n_rows) * d);
  if (keys.rot) qt.resize(static_cast<size_t>(n_rows) * d);
  sm.resize(n_rows);
  sl.resize(n_rows);
  int32_t kpos[kTile];
  const TileGather gather(kv, keys, d);
  const int tokens_per_block = std::max(1, kBlockRows / G);
  for (int32_t t0 = 0; t0 < q.n_q; t0 += tokens_per_block) {
    const int32_t t1 = std::min(q.n_q, t0 + tokens_per_block);
    const int64_t r0 = static_cast<int64_t>(t0) * G, r1 = static_cast<int64_t>(t1) * G;
    auto flush = [&] {
      for (int64_t r = r0; r < r1; ++r) {
        merge_attn(o + r * d, m + r, l + r, so.data() + r * d, sm.data() + r, sl.data() + r, 1, d);
      }
      std::fill(so.begin() + r0 * d, so.begin() + r1 * d, 0.0f);
      std::fill(sm.begin() + r0, sm.begin() + r1, kNegInf);
      std::fill(sl.begin() + r0, sl.begin() + r1, 0.0f);
    };
    std::fill(so.begin() + r0 * d, so.begin() + r1 * d, 0.0f);
    std::fill(sm.begin() + r0, sm.begin() + r1, kNegInf);
    std::fill(sl.begin() + r0, sl.begin() + r1, 0.0f);
    // Compact positions: the block's query rows turned by -shift (qt) for tiles whose keys all
    // share one rotation offset `shift` (TileGather::rotate_tile); qt_shift = 0: none yet.
    int64_t qt_shift = 0;
    const int32_t pmin = q.q_pos[t0], pmax = q.q_pos[t1 - 1];
    // Keys some row of the block can see: positions in (pmin - window, pmax].
    const int32_t first = q.window > 0 ? lower_bound_pos(kv, keys, pmin - q.window + 1) : 0;
    const int32_t last = lower_bound_pos(kv, keys, pmax + 1);
    const int32_t start = first - first % kTile;
    // Sinks (window with n_sink): the keys before position n_sink are read first, then the
    // window's tiles from after them, so no key is visited twice.
    const int32_t sink_end = q.window > 0 && q.n_sink > 0 && start > 0
                                 ? std::min(lower_bound_pos(kv, keys, q.n_sink), last)
                                 : 0;
    auto tiles = [&](int32_t from, int32_t to) {
      for (int32_t c0 = from; c0 < to; c0 += kTile) {
        if (c0 > from && c0 % kAttnSegment == 0) flush();
        const int n = std::min<int32_t>(kTile, to - c0);
        int64_t shift = 0;
        // Filling kept rows: every key of the tile is rotated (no turned query), then written.
        const int n_fill = keys.fill ? std::clamp(keys.n_kept - c0, 0, n) : 0;
        gather(c0, n, kt.data(), vt.data(), kpos, keys.rot && n_fill == 0 ? &shift : nullptr);
        if (n_fill > 0) {
          f32_to_f16_row(kt.data(), keys.kept_k + int64_t{c0} * d, int64_t{n_fill} * d);
          f32_to_f16_row(vt.data(), keys.kept_v + int64_t{c0} * d, int64_t{n_fill} * d);
        }
        if (shift != 0 && shift != qt_shift) {
          for (int64_t r = r0; r < r1; ++r) {
            std::copy(q.q + r * d, q.q + (r + 1) * d, qt.data() + r * d);
            keys.rot->rotate(qt.data() + r * d, 1, -shift);
          }
          qt_shift = shift;
        }
        const float* qsrc = shift != 0 ? qt.data() : q.q;
        for (int32_t tq = t0; tq < t1; ++tq) {
          const int32_t qp = q.q_pos[tq];
          // Positions ascend along the tile: its first and last key bound every key's visibility.
          const bool all_visible = kpos[n - 1] <= qp && (q.window <= 0 || qp - kpos[0] < q.window);
          for (int g = 0; g < G; ++g) {
            const int64_t r = static_cast<int64_t>(tq) * G + g;
            K.scores(qsrc + r * d, kt.data(), n, d, q.scale, s.data());
            float mt = kNegInf;
            if (all_visible) {
              mt = K.max(s.data(), n);
            } else {
              for (int t = 0; t < n; ++t) {
                const bool vis = kpos[t] <= qp &&
                                 (q.window <= 0 || qp - kpos[t] < q.window || kpos[t] < q.n_sink);
                if (!vis) s[t] = kNegInf;
                mt = std::max(mt, s[t]);
              }
            }
            if (mt == kNegInf) continue;
            const float m_new = std::max(sm[r], mt);
            const float alpha = sm[r] == kNegInf ? 0.0f : std::exp(sm[r] - m_new);
            const float sum = K.exp(s.data(), n, m_new);
            sl[r] = sl[r] * alpha + sum;
            K.accum(s.data(), vt.data(), n, d, alpha, so.data() + r * d);
            sm[r] = m_new;
          }
        }
      }
    };
    if (sink_end > 0) {
      tiles(0, sink_end);
      tiles(std::max(start, sink_end), last);
    } else {
      tiles(start, last);
    }
    flush();
  }
  if (!m_out) normalize_attn(o, l, n_rows, d);
}

void window_segments(const AttnQuery& q, const KvHeadView& kv, int32_t n_keys,
                     std::vector<KeySet>& out) {
  out.clear();
  const KeySet all{nullptr, 0, 0, n_keys};
  const int32_t first = q.window > 0 ? lower_bound_pos(kv, all, q.q_pos[0] - q.window + 1) : 0;
  const int32_t last = lower_bound_pos(kv, all, q.q_pos[q.n_q - 1] + 1);
  // attend() reads the window from `start` and reduces at multiples of kAttnSegment after it.
  const int32_t start = first - first % kTile;
  int32_t b = std::min(last, (start / kAttnSegment + 1) * kAttnSegment);
  out.push_back(KeySet{nullptr, 0, 0, b});
  for (; b < last; b += kAttnSegment)
    out.push_back(KeySet{nullptr, 0, b, std::min(last, b + kAttnSegment)});
}

void key_scores(const float* q, int32_t n_group, int32_t head_dim, float scale,
                const KvHeadView& kv, const KeySet& keys, float* s, int64_t ld) {
  const Kernels& K = kernels();
  const int d = head_dim;
  thread_local std::vector<float> kt, qt;
  kt.resize(static_cast<size_t>(kTile) * d);
  if (keys.rot) qt.resize(static_cast<size_t>(n_group) * d);
  const TileGather gather(kv, keys, d);
  const int32_t n_keys = keys.size();
  // Re-rotated keys (pre-RoPE scores: each key turned to position 0): a tile of nearby keys
  // turns each key by its distance from the tile's first and the query by the first's offset
  // the other way (G rows per tile rather than an angle sum per key).
  int64_t qt_shift = 0;
  for (int32_t c0 = 0; c0 < n_keys; c0 += kTile) {
    const int n = std::min<int32_t>(kTile, n_keys - c0);
    int64_t shift = 0;
    gather(c0, n, kt.data(), nullptr, nullptr, nullptr, keys.rot ? &shift : nullptr);
    if (shift != 0 && shift != qt_shift) {
      std::copy(q, q + int64_t{n_group} * d, qt.begin());
      keys.rot->rotate(qt.data(), n_group, -shift);
      qt_shift = shift;
    }
    const float* qs = shift != 0 ? qt.data() : q;
    for (int g = 0; g < n_group; ++g)
      K.scores(qs + int64_t{g} * d, kt.data(), n, d, scale, s + g * ld + c0);
  }
}

void strided_scores(const float* q, const float* k, int64_t stride, int n, int d, float scale,
                    float* s) {
#if defined(__x86_64__)
  if (use_avx2() && d % 8 == 0) return strided_scores_avx2(q, k, stride, n, d, scale, s);
#endif
  for (int t = 0; t < n; ++t) s[t] = scale * dot_f32(q, k + t * stride, d);
}

double exp_shift_sum(float* s, int64_t n, float m) {
  const Kernels& K = kernels();
  double sum = 0;
  for (int64_t i = 0; i < n; i += 4096) {
    sum += K.exp(s + i, static_cast<int>(std::min<int64_t>(4096, n - i)), m);
  }
  return sum;
}

void merge_attn(float* o_a, float* m_a, float* l_a, const float* o_b, const float* m_b,
                const float* l_b, int64_t n_rows, int32_t head_dim) {
  for (int64_t r = 0; r < n_rows; ++r) {
    if (m_b[r] == kNegInf) continue;
    float* oa = o_a + r * head_dim;
    const float* ob = o_b + r * head_dim;
    if (m_a[r] == kNegInf) {
      std::copy(ob, ob + head_dim, oa);
      m_a[r] = m_b[r];
      l_a[r] = l_b[r];
      continue;
    }
    const float m = std::max(m_a[r], m_b[r]);
    const float ca = std::exp(m_a[r] - m), cb = std::exp(m_b[r] - m);
    for (int i = 0; i < head_dim; ++i) oa[i] = oa[i] * ca + ob[i] * cb;
    l_a[r] = l_a[r] * ca + l_b[r] * cb;
    m_a[r] = m;
  }
}

void normalize_attn(float* o, const float* l, int64_t n_rows, int32_t head_dim) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
    for (int i = 0; i < head_dim; ++i) o[r * head_dim + i] *= inv;
  }
}

void attend_ref(const AttnQuery& q, const KvHeadView& kv, const KeySet& keys, float* o) {
  const int d = q.head_dim;
  const int32_t n_keys = keys.size();
  std::vector<float> k(d), v(d);
  std::vector<double> sc(n_keys), acc(d);
  for (int32_t tq = 0; tq < q.n_q; ++tq) {
    const int32_t qp = q.q_pos[tq];
    for (int g = 0; g < q.n_group; ++g) {
      const float* qr = q.q + (static_cast<int64_t>(tq) * q.n_group + g) * d;
      double mx = -std::numeric_limits<double>::infinity();
      for (int32_t i = 0; i < n_keys; ++i) {
        const int32_t j = keys.idx ? keys.idx[i] : keys.begin + i;
        const int32_t kp = keys.rot ? keys.pos_base + i : kv.position(j);
        if (kp > qp || (q.window > 0 && qp - kp >= q.window && kp >= q.n_sink)) {
          sc[i] = -std::numeric_limits<double>::infinity();
          continue;
        }
        f16_to_f32_row(kv.k_row(j), k.data(), d);
        if (keys.rot) keys.rot->rotate(k.data(), 1, int64_t{kp} - kv.position(j));
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += static_cast<double>(qr[c]) * k[c];
        sc[i] = dot * q.scale;
        mx = std::max(mx, sc[i]);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      for (int32_t i = 0; i < n_keys && mx > -std::numeric_limits<double>::infinity(); ++i) {
        if (sc[i] == -std::numeric_limits<double>::infinity()) continue;
        const double p = std::exp(sc[i] - mx);
        sum += p;
        const int32_t j = keys.idx ? keys.idx[i] : keys.begin + i;
        f16_to_f32_row(kv.v_row(j), v.data(), d);
        for (int c = 0; c < d; ++c) acc[c] += p * v[c];
      }
      float* out = o + (static_cast<int64_t>(tq) * q.n_group + g) * d;
      for (int c = 0; c < d; ++c) out[c] = sum > 0 ? static_cast<float>(acc[c] / sum) : 0.0f;
    }
  }
}

}  // namespace sieve

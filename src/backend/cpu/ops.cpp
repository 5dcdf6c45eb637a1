#include "backend/cpu/ops.h"

#include <cmath>

#include "backend/cpu/simd_avx2.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/rope_mode.h"

namespace sieve {
namespace {

#if defined(__x86_64__)
SIEVE_AVX2 float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

SIEVE_AVX2 float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum256(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

SIEVE_AVX2 void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

SIEVE_AVX2 void f32_to_f16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

SIEVE_AVX2 void f16_to_f32_avx2(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  for (; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}
#endif

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2()) return dot_avx2(a, b, n);
#endif
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2()) return axpy_avx2(a, x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void f32_to_f16_row(const float* x, uint16_t* y, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2()) return f32_to_f16_avx2(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void f16_to_f32_row(const uint16_t* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2()) return f16_to_f32_avx2(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}

namespace {

#if SIEVE_HAVE_AVX2_BUILD
// sum x[i]^2 in double, 8 lanes. A float's square is exact in double and the sum of a few
// thousand of them carries ~1e-13 relative error in any order, far below the float that the
// scale becomes; so this equals the scalar sum's scale except within 1e-13 of a rounding tie.
SIEVE_AVX2 double sum_squares_avx2(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}
#endif

double sum_squares(const float* x, int64_t n) {
#if SIEVE_HAVE_AVX2_BUILD
  if (use_avx2()) return sum_squares_avx2(x, n);
#endif
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

}  // namespace

void rms_norm(const float* x, const float* w, float eps, int64_t n_rows, int64_t n, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    const double ss = sum_squares(xr, n);
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * scale * w[i];
  }
}

namespace {

// Rotates the RoPE pairs of n_heads vectors by the angles whose cos/sin are given per pair:
// pairs (2i, 2i+1) in norm mode, (i, i + half) in neox mode.
void rotate_pairs(float* x, int n_heads, int head_dim, int half, RopeMode mode, const float* cs,
                  const float* sn) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = mode == RopeMode::norm ? 2 * i : i;
      const int b = mode == RopeMode::norm ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs[i] - x1 * sn[i];
      v[b] = x0 * sn[i] + x1 * cs[i];
    }
  }
}

}  // namespace

void rope_qk(float* q, int n_q_heads, float* k, int n_k_heads, const int32_t* pos, int64_t n_tok,
             int head_dim, int n_rot, float base, RopeMode mode, const RopeScaling& scaling) {
  const int half = n_rot / 2;
  // inv_freq[i] = base^(-2i/n_rot) (times the scaling's pair factor); the angle is formed in
  // double so that positions in the hundreds of thousands keep their precision.
  double inv_freq[512];
  scaling.inv_freqs(n_rot, base, inv_freq);
  float cs[512], sn[512];
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int i = 0; i < half; ++i) {
      const double ang = static_cast<double>(pos[t]) * inv_freq[i];
      cs[i] = static_cast<float>(std::cos(ang));
      sn[i] = static_cast<float>(std::sin(ang));
    }
    rotate_pairs(q + t * n_q_heads * head_dim, n_q_heads, head_dim, half, mode, cs, sn);
    if (k) rotate_pairs(k + t * n_k_heads * head_dim, n_k_heads, head_dim, half, mode, cs, sn);
  }
}

void rope(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim, int n_rot,
          float base, RopeMode mode, const RopeScaling& scaling) {
  rope_qk(x, n_heads, nullptr, 0, pos, n_tok, head_dim, n_rot, base, mode, scaling);
}

void add_bias(float* x, const float* bias, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * n;
    for (int64_t c = 0; c < n; ++c) row[c] += bias[c];
  }
}

RopeRotator::RopeRotator(int head_dim, int n_rot, float base, RopeMode mode,
                         const RopeScaling& scaling)
    : head_dim_(head_dim), half_(n_rot / 2), base_(base), mode_(mode), inv_freq_(n_rot / 2) {
  scaling.inv_freqs(n_rot, base, inv_freq_.data());
  lo_cos_.resize(1024 * static_cast<size_t>(half_));
  lo_sin_.resize(lo_cos_.size());
  fill(lo_cos_.data(), lo_sin_.data(), 0, 1024, 1);
  reserve(1024);
  static_assert(kNear == 1024, "rotate_near reads the lo table");
  if (mode_ == RopeMode::norm) {
    lane_cos_.resize(static_cast<size_t>(kNear) * 2 * half_);
    lane_sin_.resize(lane_cos_.size());
    for (int64_t r = 0; r < kNear; ++r) {
      for (int i = 0; i < half_; ++i) {
        const float c = lo_cos_[r * half_ + i], sn = lo_sin_[r * half_ + i];
        float* lc = lane_cos_.data() + r * 2 * half_ + 2 * i;
        float* ls = lane_sin_.data() + r * 2 * half_ + 2 * i;
        lc[0] = c, lc[1] = c;
        ls[0] = -sn, ls[1] = sn;
      }
    }
  }
}

void RopeRotator::reserve(int64_t max_abs) {
  const int64_t need = max_abs / 1024 + 1;
  if (need <= n_hi_) return;
  hi_cos_.resize(need * half_);
  hi_sin_.resize(need * half_);
  fill(hi_cos_.data(), hi_sin_.data(), n_hi_, need, 1024);
  n_hi_ = need;
}

void RopeRotator::fill(float* cs, float* sn, int64_t from, int64_t to, int64_t step) const {
  for (int64_t r = from; r < to; ++r) {
    for (int i = 0; i < half_; ++i) {
      const double a = static_cast<double>(r * step) * inv_freq_[i];
      cs[r * half_ + i] = static_cast<float>(std::cos(a));
      sn[r * half_ + i] = static_cast<float>(std::sin(a));
    }
  }
}

#if defined(__x86_64__)
namespace {
// n_heads vectors rotated by one angle (lo + hi): cos/sin formed 8 pairs at a time, once for
// all heads, and applied in place. Norm mode pairs (2i, 2i+1) are rotated with fmaddsub
// against the pair-swapped vector.
SIEVE_AVX2 void rotate_avx2(float* x, int n_heads, int head_dim, int half, bool neox, float sign,
                            const float* lc, const float* ls, const float* hc, const float* hs) {
  const __m256 sg = _mm256_set1_ps(sign);
  for (int i = 0; i < half; i += 8) {
    const __m256 c_lo = _mm256_loadu_ps(lc + i), s_lo = _mm256_loadu_ps(ls + i);
    const __m256 c_hi = _mm256_loadu_ps(hc + i), s_hi = _mm256_loadu_ps(hs + i);
    const __m256 c = _mm256_fmsub_ps(c_lo, c_hi, _mm256_mul_ps(s_lo, s_hi));
    const __m256 s = _mm256_mul_ps(sg, _mm256_fmadd_ps(s_lo, c_hi, _mm256_mul_ps(c_lo, s_hi)));
    if (neox) {
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<int64_t>(h) * head_dim;
        const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
      }
    } else {
      const __m256 cl = _mm256_unpacklo_ps(c, c), ch = _mm256_unpackhi_ps(c, c);
      const __m256 sl = _mm256_unpacklo_ps(s, s), sh = _mm256_unpackhi_ps(s, s);
      const __m256 cd[2] = {_mm256_permute2f128_ps(cl, ch, 0x20),
                            _mm256_permute2f128_ps(cl, ch, 0x31)};
      const __m256 sd[2] = {_mm256_permute2f128_ps(sl, sh, 0x20),
                            _mm256_permute2f128_ps(sl, sh, 0x31)};
      for (int h = 0; h < n_heads; ++h) {
        float* w = x + static_cast<int64_t>(h) * head_dim + 2 * i;
        for (int part = 0; part < 2; ++part) {
          const __m256 v = _mm256_loadu_ps(w + 8 * part);
          const __m256 vs = _mm256_permute_ps(v, 0xB1);  // (x1, x0) per pair
          _mm256_storeu_ps(w + 8 * part,
                           _mm256_fmaddsub_ps(v, cd[part], _mm256_mul_ps(vs, sd[part])));
        }
      }
    }
  }
}
}  // namespace
#endif

void RopeRotator::rotate(float* x, int n_heads, int64_t offset) const {
  const int64_t a = offset < 0 ? -offset : offset;
  const float sign = offset < 0 ? -1.0f : 1.0f;
  const float* lc = lo_cos_.data() + (a % 1024) * half_;
  const float* ls = lo_sin_.data() + (a % 1024) * half_;
  const float* hc = hi_cos_.data() + (a / 1024) * half_;
  const float* hs = hi_sin_.data() + (a / 1024) * half_;
#if defined(__x86_64__)
  static const bool avx2 = use_avx2();
  if (avx2 && half_ % 8 == 0) {
    rotate_avx2(x, n_heads, head_dim_, half_, mode_ == RopeMode::neox, sign, lc, ls, hc, hs);
    return;
  }
#endif
  float cs[512], sn[512];
  for (int i = 0; i < half_; ++i) {
    cs[i] = lc[i] * hc[i] - ls[i] * hs[i];
    sn[i] = sign * (ls[i] * hc[i] + lc[i] * hs[i]);
  }
  rotate_pairs(x, n_heads, head_dim_, half_, mode_, cs, sn);
}

#if defined(__x86_64__)
namespace {
// rotate_near's rows: norm mode from the lane tables (x * cos + pair_swap(x) * sin), neox
// from the lo table (pairs i and i + half).
SIEVE_AVX2 void rotate_near_avx2(float* x, int n_rows, int64_t stride, const int64_t* delta,
                                 int half, bool neox, const float* lo_cos, const float* lo_sin,
                                 const float* lane_cos, const float* lane_sin) {
  for (int t = 0; t < n_rows; ++t) {
    const int64_t dl = delta[t];
    if (dl == 0) continue;
    const int64_t a = dl < 0 ? -dl : dl;
    const __m256 sg = _mm256_set1_ps(dl < 0 ? -1.0f : 1.0f);
    float* v = x + t * stride;
    if (neox) {
      const float* c = lo_cos + a * half;
      const float* sn = lo_sin + a * half;
      for (int i = 0; i < half; i += 8) {
        const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_mul_ps(sg, _mm256_loadu_ps(sn + i));
        const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, cv, _mm256_mul_ps(x1, sv)));
        _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, sv, _mm256_mul_ps(x1, cv)));
      }
      continue;
    }
    const float* c = lane_cos + a * 2 * half;
    const float* sn = lane_sin + a * 2 * half;
    for (int i = 0; i < 2 * half; i += 8) {
      const __m256 xv = _mm256_loadu_ps(v + i);
      const __m256 xs = _mm256_permute_ps(xv, 0xB1);  // (x1, x0) per pair
      const __m256 sv = _mm256_mul_ps(sg, _mm256_loadu_ps(sn + i));
      _mm256_storeu_ps(v + i, _mm256_fmadd_ps(xs, sv, _mm256_mul_ps(xv, _mm256_loadu_ps(c + i))));
    }
  }
}
}  // namespace
#endif

void RopeRotator::rotate_near(float* x, int n_rows, int64_t stride, const int64_t* delta) const {
#if defined(__x86_64__)
  static const bool avx2 = use_avx2();
  if (avx2 && half_ % 8 == 0) {
    rotate_near_avx2(x, n_rows, stride, delta, half_, mode_ == RopeMode::neox, lo_cos_.data(),
                     lo_sin_.data(), lane_cos_.data(), lane_sin_.data());
    return;
  }
#endif
  float cs[512], sn[512];
  for (int t = 0; t < n_rows; ++t) {
    const int64_t dl = delta[t];
    if (dl == 0) continue;
    const int64_t a = dl < 0 ? -dl : dl;
    const float sign = dl < 0 ? -1.0f : 1.0f;
    for (int i = 0; i < half_; ++i) {
      cs[i] = lo_cos_[a * half_ + i];
      sn[i] = sign * lo_sin_[a * half_ + i];
    }
    rotate_pairs(x + t * stride, 1, head_dim_, half_, mode_, cs, sn);
  }
}

namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

#if SIEVE_HAVE_AVX2_BUILD
// The activations run on the caller alone in decode (one row of n_ff), between two pool jobs,
// so their cost is serial time: 8 lanes with simd::exp_neg (a polynomial) instead of one
// libm exp per element (~1,500 per layer for SmolLM2, ~10 us). Every element goes through the
// vector code, the last partial block on a padded copy, so its value does not depend on n or
// on its position (a prefill row equals the decode row).
// sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) for g < 0, with e = exp(-|g|) <= 1.
SIEVE_AVX2_INLINE __m256 sigmoid8(__m256 g) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  const __m256 e = simd::exp_neg(_mm256_or_ps(g, sign));  // exp(-|g|)
  const __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_div_ps(num, _mm256_add_ps(one, e));
}

// silu(g) * u
SIEVE_AVX2_INLINE __m256 silu8(__m256 g, __m256 u) {
  return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), u);
}

// 0.5 g (1 + tanh(y)) u with y = c g (1 + 0.044715 g^2); 1 + tanh(y) = 2 sigmoid(2y).
SIEVE_AVX2_INLINE __m256 gelu8(__m256 g, __m256 u) {
  const __m256 g2 = _mm256_mul_ps(g, g);
  const __m256 y =
      _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluC), g),
                    _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g2, _mm256_set1_ps(1.0f)));
  const __m256 s = sigmoid8(_mm256_add_ps(y, y));
  return _mm256_mul_ps(_mm256_mul_ps(g, s), u);
}

template <__m256 (*F)(__m256, __m256)>
SIEVE_AVX2 void act_mul_avx2(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i, F(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {};
    for (int64_t j = 0; i + j < n; ++j) {
      g[j] = gate[i + j];
      u[j] = up[i + j];
    }
    _mm256_store_ps(g, F(_mm256_load_ps(g), _mm256_load_ps(u)));
    for (int64_t j = 0; i + j < n; ++j) gate[i + j] = g[j];
  }
}
#endif

}  // namespace

void silu_mul(float* gate, const float* up, int64_t n) {
#if SIEVE_HAVE_AVX2_BUILD
  if (use_avx2()) return act_mul_avx2<silu8>(gate, up, n);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
#if SIEVE_HAVE_AVX2_BUILD
  if (use_avx2()) return act_mul_avx2<gelu8>(gate, up, n);
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = 0.5f * g * (1.0f + std::tanh(kGeluC * g * (1.0f + 0.044715f * g * g))) * up[i];
  }
}

}  // namespace sieve

// AVX2+FMA+F16C kernels for quant.h: dequantization (bit-identical to the scalar reference),
// activation quantization (bit-identical bytes) and fused dot products, whose integer part is
// exact (maddubs on u8 weights x s8 activations, then madd into int32) and whose float part
// follows the dot-product order of quant.h (bit-identical to the scalar reference too).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kdot_avx2.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/simd_avx2.h"
#include "core/assert.h"
#include "core/fp16.h"

#if SIEVE_HAVE_AVX2_BUILD

namespace sieve::cpu {
namespace {

using namespace qblock;
using simd::h2f;
using simd::loadu;
using simd::no_contract;

// ---------------------------------------------------------------- dequantization

// 32 signed bytes * d -> dst[0..31].
SIEVE_AVX2_INLINE void store_i8x32_scaled(float* dst, __m256i q, __m256 d) {
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(dst + 0, _mm256_mul_ps(simd::i8x8_to_f32(lo), d));
  _mm256_storeu_ps(dst + 8, _mm256_mul_ps(simd::i8x8_to_f32(_mm_unpackhi_epi64(lo, lo)), d));
  _mm256_storeu_ps(dst + 16, _mm256_mul_ps(simd::i8x8_to_f32(hi), d));
  _mm256_storeu_ps(dst + 24, _mm256_mul_ps(simd::i8x8_to_f32(_mm_unpackhi_epi64(hi, hi)), d));
}

// 32 unsigned bytes -> q*d + m (product rounded before the add, as in the reference).
SIEVE_AVX2_INLINE void store_u8x32_affine(float* dst, __m256i q, __m256 d, __m256 m) {
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
  for (int k = 0; k < 4; ++k) {
    const __m256 p = no_contract(_mm256_mul_ps(simd::u8x8_to_f32(parts[k]), d));
    _mm256_storeu_ps(dst + 8 * k, _mm256_add_ps(p, m));
  }
}

// 32 unsigned bytes -> d*q - m.
SIEVE_AVX2_INLINE void store_u8x32_dq_minus(float* dst, __m256i q, __m256 d, __m256 m) {
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
  for (int k = 0; k < 4; ++k) {
    const __m256 p = no_contract(_mm256_mul_ps(d, simd::u8x8_to_f32(parts[k])));
    _mm256_storeu_ps(dst + 8 * k, _mm256_sub_ps(p, m));
  }
}

SIEVE_AVX2 void dq_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  }
  for (; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
}

SIEVE_AVX2 void dq_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}

void dq_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

SIEVE_AVX2 void dq_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const __m256i q = _mm256_sub_epi8(simd::nibbles_to_bytes(b[i].qs), _mm256_set1_epi8(8));
    store_i8x32_scaled(dst, q, _mm256_set1_ps(h2f(b[i].d)));
  }
}

SIEVE_AVX2 void dq_q4_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    store_u8x32_affine(dst, simd::nibbles_to_bytes(b[i].qs), _mm256_set1_ps(h2f(b[i].d)),
                       _mm256_set1_ps(h2f(b[i].m)));
  }
}

SIEVE_AVX2 void dq_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const __m256i q = _mm256_sub_epi8(simd::q5_bytes(b[i].qs, b[i].qh), _mm256_set1_epi8(16));
    store_i8x32_scaled(dst, q, _mm256_set1_ps(h2f(b[i].d)));
  }
}

SIEVE_AVX2 void dq_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    store_u8x32_affine(dst, simd::q5_bytes(b[i].qs, b[i].qh), _mm256_set1_ps(h2f(b[i].d)),
                       _mm256_set1_ps(h2f(b[i].m)));
  }
}

SIEVE_AVX2 void dq_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    store_i8x32_scaled(dst, loadu(b[i].qs), _mm256_set1_ps(h2f(b[i].d)));
  }
}

template <bool kQ5>
SIEVE_AVX2 void dq_qk45(const void* src, float* dst, int64_t n) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint8_t* scales;
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    float d, dmin;
    if constexpr (kQ5) {
      const auto& a = static_cast<const BlockQ5_K*>(src)[i];
      scales = a.scales, qs = a.qs, qh = a.qh, d = h2f(a.d), dmin = h2f(a.dmin);
    } else {
      const auto& a = static_cast<const BlockQ4_K*>(src)[i];
      scales = a.scales, qs = a.qs, d = h2f(a.d), dmin = h2f(a.dmin);
    }
    __m256i hbits = kQ5 ? loadu(qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, m0, sc1, m1;
      scale_min_k4(2 * c, scales, &sc0, &m0);
      scale_min_k4(2 * c + 1, scales, &sc1, &m1);
      const __m256i q = loadu(qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kQ5) {
        const __m256i one = _mm256_set1_epi8(1);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
        hbits = _mm256_srli_epi16(hbits, 2);
      }
      store_u8x32_dq_minus(dst, lo, _mm256_set1_ps(d * sc0), _mm256_set1_ps(dmin * m0));
      store_u8x32_dq_minus(dst + 32, hi, _mm256_set1_ps(d * sc1), _mm256_set1_ps(dmin * m1));
      dst += 64;
    }
  }
}

SIEVE_AVX2 void dq_q6_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(b[i].d);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      simd::q6_half(b[i].ql + 64 * h, b[i].qh + 32 * h, q);
      for (int k = 0; k < 4; ++k) {
        const __m256i s = _mm256_sub_epi8(q[k], _mm256_set1_epi8(32));
        const __m128i lo = _mm256_castsi256_si128(s);
        const __m128i hi = _mm256_extracti128_si256(s, 1);
        const __m256 d0 = _mm256_set1_ps(d * b[i].scales[8 * h + 2 * k]);
        const __m256 d1 = _mm256_set1_ps(d * b[i].scales[8 * h + 2 * k + 1]);
        float* y = dst + 256 * i + 128 * h + 32 * k;
        _mm256_storeu_ps(y + 0, _mm256_mul_ps(d0, simd::i8x8_to_f32(lo)));
        _mm256_storeu_ps(y + 8, _mm256_mul_ps(d0, simd::i8x8_to_f32(_mm_unpackhi_epi64(lo, lo))));
        _mm256_storeu_ps(y + 16, _mm256_mul_ps(d1, simd::i8x8_to_f32(hi)));
        _mm256_storeu_ps(y + 24, _mm256_mul_ps(d1, simd::i8x8_to_f32(_mm_unpackhi_epi64(hi, hi))));
      }
    }
  }
}

// ---------------------------------------------------------------- activation quantization

void qa_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

SIEVE_AVX2 void qa_f16(const float* x, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) d[i] = f32_to_fp16(x[i]);
}

// Round to nearest even on the bit pattern; NaNs become quiet NaNs (as f32_to_bf16).
SIEVE_AVX2 void qa_bf16(const float* x, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(v, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), inf);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(64));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // 8 int32 holding u16 values -> 8 u16 (packus cannot overflow: values < 65536).
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), packed);
  }
  for (; i < n; ++i) d[i] = f32_to_bf16(x[i]);
}

// One 32-element block: qs[32] (int8) and the sum of the quants; returns d (f32, unrounded).
SIEVE_AVX2_INLINE float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
  __m256 v[4];
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float am = _mm_cvtss_f32(m4);
  const float d = am / 127.0f;
  const __m256 id = _mm256_set1_ps(am != 0.0f ? 127.0f / am : 0.0f);
  __m256i i32[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 r =
        _mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    i32[k] = _mm256_cvtps_epi32(r);
  }
  if (sum) {
    *sum = simd::hsum_i32(
        _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3])));
  }
  // packs work per 128-bit lane; the final permute restores element order.
  const __m256i p01 = _mm256_packs_epi32(i32[0], i32[1]);
  const __m256i p23 = _mm256_packs_epi32(i32[2], i32[3]);
  const __m256i p = _mm256_packs_epi16(p01, p23);
  const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
  return d;
}

SIEVE_AVX2 void qa_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    y[i].d = f32_to_fp16(quantize_block_q8(x + kQK * i, y[i].qs, nullptr));
  }
}

SIEVE_AVX2 void qa_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum = 0;
    const float d = quantize_block_q8(x + kQK * i, y[i].qs, &sum);
    y[i].d = f32_to_fp16(d);
    y[i].s = f32_to_fp16(d * static_cast<float>(sum));
  }
}

SIEVE_AVX2 void qa_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k)
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float am = _mm_cvtss_f32(m4);
    if (am == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The reference keeps the first element of largest magnitude (its sign matters).
    float max = 0.0f;
    const __m256 amv = _mm256_set1_ps(am);
    for (int k = 0; k < 32; ++k) {
      const int mask = _mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), amv, _CMP_EQ_OQ));
      if (mask) {
        max = x[8 * k + __builtin_ctz(static_cast<unsigned>(mask))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i lim = _mm256_set1_epi32(127);
    for (int g = 0; g < 16; ++g) {  // 16 elements per bsum
      __m256i q[2];
      for (int h = 0; h < 2; ++h) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * g + 8 * h)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[h] = _mm256_min_epi32(_mm256_cvtps_epi32(r), lim);
      }
      y[i].bsums[g] = static_cast<int16_t>(simd::hsum_i32(_mm256_add_epi32(q[0], q[1])));
      const __m256i p16 = _mm256_packs_epi32(q[0], q[1]);  // lanes: 0-3 8-11 | 4-7 12-15
      const __m128i p8 =
          _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
      // p8 bytes: 0-3, 8-11, 4-7, 12-15 -> reorder dwords 0,2,1,3.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * g),
                       _mm_shuffle_epi32(p8, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    y[i].d = 1.0f / iscale;
  }
}

// ---------------------------------------------------------------- dot products
//
// All of them follow the dot-product order of quant.h (the scalar kernels and every matmul
// path do too), so they give the scalar reference's bits. The integer part of a block is
// reduced to one exact int32, then one scalar FMA per block (two for the min terms) extends
// a single running sum.

using simd::fma_ss;

// Float weights: one 8-lane FMA chain, the hsum tree, an FMA tail.
template <class LoadW, class LoadX>
SIEVE_AVX2_INLINE float float_dot(int64_t n, LoadW lw, LoadX lx) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(lw.v8(i), lx.v8(i), acc);
  float s = simd::hsum(acc);
  for (; i < n; ++i) s = fma_ss(lw.s(i), lx.s(i), s);
  return s;
}

struct LoadF32 {
  const float* p;
  SIEVE_AVX2_INLINE __m256 v8(int64_t i) const { return _mm256_loadu_ps(p + i); }
  SIEVE_AVX2_INLINE float s(int64_t i) const { return p[i]; }
};
template <bool kBf16>
struct LoadHalf {
  const uint16_t* p;
  SIEVE_AVX2_INLINE __m256 v8(int64_t i) const {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    if constexpr (kBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
    } else {
      return _mm256_cvtph_ps(v);
    }
  }
  SIEVE_AVX2_INLINE float s(int64_t i) const {
    return kBf16 ? bf16_to_f32(p[i]) : fp16_to_f32(p[i]);
  }
};

SIEVE_AVX2 float vd_f32(const void* w, const void* x, int64_t n) {
  return float_dot(n, LoadF32{static_cast<const float*>(w)}, LoadF32{static_cast<const float*>(x)});
}

template <bool kBf16>
SIEVE_AVX2 float vd_half(const void* w, const void* x, int64_t n) {
  return float_dot(n, LoadHalf<kBf16>{static_cast<const uint16_t*>(w)},
                   LoadHalf<kBf16>{static_cast<const uint16_t*>(x)});
}

// Legacy 32-blocks. Q4_0/Q5_0 use unsigned quants and subtract offset*sum(y) inside the int16
// lanes (exact).
SIEVE_AVX2 float vd_q4_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  const __m256i off = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i y = loadu(b[i].qs);
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(simd::nibbles_to_bytes(a[i].qs), y),
                                       _mm256_maddubs_epi16(off, y));
    const int s = simd::hsum_i32(_mm256_madd_epi16(p, ones));
    acc = fma_ss(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), acc);
  }
  return acc;
}

SIEVE_AVX2 float vd_q4_1(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = simd::hsum_i32(simd::dot_u8s8(simd::nibbles_to_bytes(a[i].qs), loadu(b[i].qs)));
    acc = fma_ss(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), acc);
    acc = fma_ss(h2f(a[i].m), h2f(b[i].s), acc);
  }
  return acc;
}

SIEVE_AVX2 float vd_q5_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  const __m256i off = _mm256_set1_epi8(16);
  const __m256i ones = _mm256_set1_epi16(1);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i y = loadu(b[i].qs);
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(simd::q5_bytes(a[i].qs, a[i].qh), y),
                                       _mm256_maddubs_epi16(off, y));
    const int s = simd::hsum_i32(_mm256_madd_epi16(p, ones));
    acc = fma_ss(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), acc);
  }
  return acc;
}

SIEVE_AVX2 float vd_q5_1(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = simd::hsum_i32(simd::dot_u8s8(simd::q5_bytes(a[i].qs, a[i].qh), loadu(b[i].qs)));
    acc = fma_ss(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), acc);
    acc = fma_ss(h2f(a[i].m), h2f(b[i].s), acc);
  }
  return acc;
}

SIEVE_AVX2 float vd_q8_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = simd::hsum_i32(simd::dot_s8s8(loadu(a[i].qs), loadu(b[i].qs)));
    acc = fma_ss(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), acc);
  }
  return acc;
}

// Q4_K/Q5_K: the 6-bit scales multiply the int16 pair sums inside madd; the mins meet the
// Q8_K bsums in one more madd. Two int->float conversions and FMAs per super-block.
template <bool kQ5>
SIEVE_AVX2 float vd_qk45(const void* w, const void* x, int64_t n) {
  using B = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
  const auto* a = static_cast<const B*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i isum, imin;
    kdot::qk45<kQ5>(a[i], b[i], &isum, &imin);
    const int is = simd::hsum_i32(isum);
    const int im = simd::hsum_i32(imin);
    acc = fma_ss(static_cast<float>(is), h2f(a[i].d) * b[i].d, acc);
    acc = fma_ss(-static_cast<float>(im), h2f(a[i].dmin) * b[i].d, acc);
  }
  return acc;
}

SIEVE_AVX2 float vd_q6_k(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int is = simd::hsum_i32(kdot::q6k(a[i], b[i]));
    acc = fma_ss(static_cast<float>(is), h2f(a[i].d) * b[i].d, acc);
  }
  return acc;
}

}  // namespace

QuantKernels quant_kernels_avx2(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return {dq_f32, qa_f32, vd_f32};
    case GgmlType::F16:
      return {dq_f16, qa_f16, vd_half<false>};
    case GgmlType::BF16:
      return {dq_bf16, qa_bf16, vd_half<true>};
    case GgmlType::Q4_0:
      return {dq_q4_0, qa_q8_0, vd_q4_0};
    case GgmlType::Q4_1:
      return {dq_q4_1, qa_q8_1, vd_q4_1};
    case GgmlType::Q5_0:
      return {dq_q5_0, qa_q8_0, vd_q5_0};
    case GgmlType::Q5_1:
      return {dq_q5_1, qa_q8_1, vd_q5_1};
    case GgmlType::Q8_0:
      return {dq_q8_0, qa_q8_0, vd_q8_0};
    case GgmlType::Q4_K:
      return {dq_qk45<false>, qa_q8_k, vd_qk45<false>};
    case GgmlType::Q5_K:
      return {dq_qk45<true>, qa_q8_k, vd_qk45<true>};
    case GgmlType::Q6_K:
      return {dq_q6_k, qa_q8_k, vd_q6_k};
    default:
      break;
  }
  SIEVE_ASSERT(false && "unsupported weight type");
  return {};
}

}  // namespace sieve::cpu

#else  // no AVX2 build: the scalar table stands in

namespace sieve::cpu {
QuantKernels quant_kernels_avx2(GgmlType t) {
  return quant_kernels_scalar(t);
}
}  // namespace sieve::cpu

#endif

// AVX2+FMA+F16C kernels for quant.h: dequantization (bit-identical to the scalar reference),
// activation quantization (bit-identical bytes) and fused dot products, whose integer part is
// exact (maddubs on u8 weights x s8 activations, then madd into int32) and whose float part
// differs from the scalar kernels only in summation order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/quant_blocks.h"
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

SIEVE_AVX2 float vd_f32(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] =
          _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  float s = simd::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <bool kBf16>
SIEVE_AVX2_INLINE __m256 load8_half(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  } else {
    return _mm256_cvtph_ps(v);
  }
}

template <bool kBf16>
SIEVE_AVX2 float vd_half(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const uint16_t*>(x);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(load8_half<kBf16>(a + i + 8 * k), load8_half<kBf16>(b + i + 8 * k),
                               acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(load8_half<kBf16>(a + i), load8_half<kBf16>(b + i), acc[0]);
  float s = simd::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) {
    s += kBf16 ? bf16_to_f32(a[i]) * bf16_to_f32(b[i]) : fp16_to_f32(a[i]) * fp16_to_f32(b[i]);
  }
  return s;
}

// Legacy 32-blocks. Two blocks per iteration with separate accumulators hide FMA latency.
// Q4_0/Q5_0 use unsigned quants and subtract offset*sum(y) inside the int16 lanes (exact).
SIEVE_AVX2 float vd_q4_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  const __m256i off = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i y = loadu(b[i].qs);
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(simd::nibbles_to_bytes(a[i].qs), y),
                                       _mm256_maddubs_epi16(off, y));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), f, acc);
  }
  return simd::hsum(acc);
}

SIEVE_AVX2 float vd_q4_1(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float summs = 0;
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256 f0 =
        _mm256_cvtepi32_ps(simd::dot_u8s8(simd::nibbles_to_bytes(a[i].qs), loadu(b[i].qs)));
    const __m256 f1 =
        _mm256_cvtepi32_ps(simd::dot_u8s8(simd::nibbles_to_bytes(a[i + 1].qs), loadu(b[i + 1].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), f0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i + 1].d) * h2f(b[i + 1].d)), f1, acc1);
    summs += h2f(a[i].m) * h2f(b[i].s) + h2f(a[i + 1].m) * h2f(b[i + 1].s);
  }
  for (; i < nb; ++i) {
    const __m256 f0 =
        _mm256_cvtepi32_ps(simd::dot_u8s8(simd::nibbles_to_bytes(a[i].qs), loadu(b[i].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), f0, acc0);
    summs += h2f(a[i].m) * h2f(b[i].s);
  }
  return simd::hsum(_mm256_add_ps(acc0, acc1)) + summs;
}

SIEVE_AVX2 float vd_q5_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  const __m256i off = _mm256_set1_epi8(16);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i y = loadu(b[i].qs);
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(simd::q5_bytes(a[i].qs, a[i].qh), y),
                                       _mm256_maddubs_epi16(off, y));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), f, acc);
  }
  return simd::hsum(acc);
}

SIEVE_AVX2 float vd_q5_1(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 f =
        _mm256_cvtepi32_ps(simd::dot_u8s8(simd::q5_bytes(a[i].qs, a[i].qh), loadu(b[i].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), f, acc);
    summs += h2f(a[i].m) * h2f(b[i].s);
  }
  return simd::hsum(acc) + summs;
}

SIEVE_AVX2 float vd_q8_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256 f0 = _mm256_cvtepi32_ps(simd::dot_s8s8(loadu(a[i].qs), loadu(b[i].qs)));
    const __m256 f1 = _mm256_cvtepi32_ps(simd::dot_s8s8(loadu(a[i + 1].qs), loadu(b[i + 1].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), f0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i + 1].d) * h2f(b[i + 1].d)), f1, acc1);
  }
  for (; i < nb; ++i) {
    const __m256 f0 = _mm256_cvtepi32_ps(simd::dot_s8s8(loadu(a[i].qs), loadu(b[i].qs)));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), f0, acc0);
  }
  return simd::hsum(_mm256_add_ps(acc0, acc1));
}

// The 12 packed scale bytes of Q4_K/Q5_K (§2.4) -> bytes sc0..sc7, m0..m7, with four 32-bit
// mask-and-shift steps instead of 16 scalar extractions:
//   sc0..3 = bytes 0..3 & 63            m0..3 = bytes 4..7 & 63
//   sc4..7 = (bytes 8..11 & 15) | (bytes 0..3 >> 6) << 4
//   m4..7  = (bytes 8..11 >> 4) | (bytes 4..7 >> 6) << 4
SIEVE_AVX2_INLINE __m128i k4_scales_mins(const uint8_t* scales) {
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                        static_cast<int>(m_hi));
}

// Shuffle control that broadcasts int16 lane j of each 128-bit half.
SIEVE_AVX2_INLINE __m256i bcast16_ctrl(int j) {
  return _mm256_set1_epi16(static_cast<int16_t>(((2 * j + 1) << 8) | (2 * j)));
}

// Q4_K/Q5_K: the 6-bit scales multiply the int16 pair sums inside madd; the mins meet the
// Q8_K bsums in one more madd. One int->float conversion per super-block.
template <bool kQ5>
SIEVE_AVX2 float vd_qk45(const void* w, const void* x, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(x);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint8_t* scales;
    const uint8_t* qs;
    const uint8_t* qh = nullptr;
    float d, dmin;
    if constexpr (kQ5) {
      const auto& a = static_cast<const BlockQ5_K*>(w)[i];
      scales = a.scales, qs = a.qs, qh = a.qh, d = h2f(a.d), dmin = h2f(a.dmin);
    } else {
      const auto& a = static_cast<const BlockQ4_K*>(w)[i];
      scales = a.scales, qs = a.qs, d = h2f(a.d), dmin = h2f(a.dmin);
    }
    const __m128i sm = k4_scales_mins(scales);
    // mins as int16 pairs (m_j, m_j) against bsums (16 per super-block, 2 per sub-block).
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
    const __m256i imin = _mm256_madd_epi16(loadu(b[i].bsums), mins);
    accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_set1_ps(b[i].d * dmin), accm);
    const __m256i sc16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // sc0..7 in both halves

    __m256i hbits = kQ5 ? loadu(qh) : _mm256_setzero_si256();
    __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
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
      const __m256i p0 = _mm256_maddubs_epi16(lo, loadu(b[i].qs + 64 * c));
      const __m256i p1 = _mm256_maddubs_epi16(hi, loadu(b[i].qs + 64 * c + 32));
      isum0 = _mm256_add_epi32(
          isum0, _mm256_madd_epi16(p0, _mm256_shuffle_epi8(sc16, bcast16_ctrl(2 * c))));
      isum1 = _mm256_add_epi32(
          isum1, _mm256_madd_epi16(p1, _mm256_shuffle_epi8(sc16, bcast16_ctrl(2 * c + 1))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * d),
                          _mm256_cvtepi32_ps(_mm256_add_epi32(isum0, isum1)), acc);
  }
  return simd::hsum(acc) - simd::hsum(accm);
}

// Q6_K: unsigned 6-bit quants in maddubs; the -32 offset is 32*sum_j(sc_j*bsum_j), exact.
SIEVE_AVX2 float vd_q6_k(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales)));
    __m256i isum = _mm256_slli_epi32(_mm256_madd_epi16(loadu(b[i].bsums), sc16), 5);
    isum = _mm256_sub_epi32(_mm256_setzero_si256(), isum);
    // [sc0..7 | sc0..7] and [sc8..15 | sc8..15]: run k of half h takes sc[8h+2k] (first 16
    // elements, low 128 bits) and sc[8h+2k+1] (high 128 bits).
    const __m256i halves[2] = {_mm256_permute4x64_epi64(sc16, 0x44),
                               _mm256_permute4x64_epi64(sc16, 0xEE)};
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      simd::q6_half(a[i].ql + 64 * h, a[i].qh + 32 * h, q);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i p = _mm256_maddubs_epi16(q[k], loadu(b[i].qs + 128 * h + 32 * k));
        const __m256i ctrl =
            _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((4 * k + 3) << 8) | (4 * k + 2))),
                             _mm_set1_epi16(static_cast<int16_t>(((4 * k + 1) << 8) | (4 * k))));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(halves[h], ctrl)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * h2f(a[i].d)), _mm256_cvtepi32_ps(isum), acc);
  }
  return simd::hsum(acc);
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

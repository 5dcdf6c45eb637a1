// AVX2 helpers shared by the quant and matmul kernels. Every function carries the target
// attribute, so the files that include this header compile for baseline x86-64 and only the
// functions the dispatcher picks (use_avx2()) execute AVX2 instructions.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SIEVE_HAVE_AVX2_BUILD 1

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define SIEVE_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SIEVE_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace sieve::simd {

// exp(x) for x <= 0 (softmax after subtracting the max): range reduction to
// r in [-ln2/2, ln2/2], degree-6 Taylor polynomial (rel. error ~2e-7), scale by 2^n.
// Inputs below -87 (and -inf) give exactly 0.
SIEVE_AVX2_INLINE __m256 exp_neg(__m256 x) {
  const __m256 zero_mask = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(zero_mask, res);
}

SIEVE_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

SIEVE_AVX2_INLINE int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Transposing lane sums of 8 int32 vectors (exact: integer adds), in three stages so that a
// kernel can reduce rows as it produces them:
//   hsum2_i32(a, b)  -> per 128-bit half: [a0+a2, b0+b2, a1+a3, b1+b3]
//   hsum4_i32(t0, t1) (t0 = hsum2(v0, v1), t1 = hsum2(v2, v3)) -> [v0 v1 v2 v3] partial sums,
//                       the elements 0..3 in the low half and 4..7 in the high half
//   hsum8_i32(u0, u1) (u0 = v0..v3, u1 = v4..v7) -> lane l = the sum of the 8 lanes of v_l.
SIEVE_AVX2_INLINE __m256i hsum2_i32(__m256i a, __m256i b) {
  return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
SIEVE_AVX2_INLINE __m256i hsum4_i32(__m256i t0, __m256i t1) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1));
}
SIEVE_AVX2_INLINE __m256i hsum8_i32(__m256i u0, __m256i u1) {
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                          _mm256_permute2x128_si256(u0, u1, 0x31));
}

// fma(a, b, c) with one rounding, on a scalar: the same operation as one lane of
// _mm256_fmadd_ps (dot-product chains must give the same bits in every kernel).
SIEVE_AVX2_INLINE float fma_ss(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

SIEVE_AVX2_INLINE float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

// Keeps the compiler from fusing a multiply and a following add into one FMA, which would
// change the rounding of dequantized values (they must equal the scalar reference exactly).
SIEVE_AVX2_INLINE __m256 no_contract(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

SIEVE_AVX2_INLINE __m256i loadu(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 16 bytes of packed nibbles -> 32 bytes: lanes 0..15 = low nibbles, 16..31 = high nibbles
// (the Q4/Q5 element order: byte j holds elements j and j+16).
SIEVE_AVX2_INLINE __m256i nibbles_to_bytes(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, byte i = 0xFF where bit i is set.
SIEVE_AVX2_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), shuf);
  const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  v = _mm256_and_si256(v, sel);
  return _mm256_cmpeq_epi8(v, sel);
}

// Sum of u8 x s8 products in groups of 4 -> 8 int32 lanes (no int16 saturation for
// |u| <= 127 or |u| * |s| pairs below 2^15).
SIEVE_AVX2_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// s8 x s8 via the sign trick (|a| as the unsigned operand, b with a's sign).
SIEVE_AVX2_INLINE __m256i dot_s8s8(__m256i a, __m256i b) {
  return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// 8 u8 -> 8 f32 (exact).
SIEVE_AVX2_INLINE __m256 u8x8_to_f32(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}
SIEVE_AVX2_INLINE __m256 i8x8_to_f32(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

// Q5 quants: nibbles plus bit 4 from the 32-bit qh (bit i -> element i), as bytes 0..31.
SIEVE_AVX2_INLINE __m256i q5_bytes(const uint8_t* qs, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i hb = _mm256_and_si256(simd::bits_to_bytes(bits), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(simd::nibbles_to_bytes(qs), hb);
}

// The four 32-byte runs of 6-bit values (0..63) of one Q6_K half: elements l, l+32, l+64, l+96.
SIEVE_AVX2_INLINE void q6_half(const uint8_t* ql, const uint8_t* qh, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i a = loadu(ql);
  const __m256i b = loadu(ql + 32);
  const __m256i h = loadu(qh);
  q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
  q[1] = _mm256_or_si256(_mm256_and_si256(b, m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
}

}  // namespace sieve::simd

#endif  // x86-64 with GCC/Clang

// Exact integer parts of one K-quant super-block dot (AVX2), shared by vec_dot (one weight row)
// and the decode kernels (8 weight rows per step): each returns int32 lanes whose sum is the
// super-block's integer dot, so the caller decides where the (exact) lane sums happen and the
// float chain stays the dot-product order of quant.h.
#pragma once

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/simd_avx2.h"

#if SIEVE_HAVE_AVX2_BUILD

#include <cstring>
#include <type_traits>

namespace sieve::cpu::kdot {

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

// Q4_K/Q5_K: the 6-bit scales multiply the int16 pair sums inside madd; the mins meet the Q8_K
// bsums in one more madd. *isum lanes sum to I = sum_j sc_j * dot_j, *imin lanes to
// M = sum_j m_j * bsum32_j.
template <bool kQ5>
SIEVE_AVX2_INLINE void qk45(const std::conditional_t<kQ5, qblock::BlockQ5_K, qblock::BlockQ4_K>& a,
                            const qblock::BlockQ8_K& b, __m256i* isum, __m256i* imin) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m128i sm = k4_scales_mins(a.scales);
  // mins as int16 pairs (m_j, m_j) against bsums (16 per super-block, 2 per sub-block).
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
  *imin = _mm256_madd_epi16(simd::loadu(b.bsums), mins);
  const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // sc0..7, both halves

  __m256i hbits = _mm256_setzero_si256();
  if constexpr (kQ5) hbits = simd::loadu(a.qh);
  __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m256i q = simd::loadu(a.qs + 32 * c);
    __m256i lo = _mm256_and_si256(q, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if constexpr (kQ5) {
      const __m256i one = _mm256_set1_epi8(1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
      hi = _mm256_or_si256(
          hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
      hbits = _mm256_srli_epi16(hbits, 2);
    }
    const __m256i p0 = _mm256_maddubs_epi16(lo, simd::loadu(b.qs + 64 * c));
    const __m256i p1 = _mm256_maddubs_epi16(hi, simd::loadu(b.qs + 64 * c + 32));
    isum0 = _mm256_add_epi32(isum0,
                             _mm256_madd_epi16(p0, _mm256_shuffle_epi8(sc16, bcast16_ctrl(2 * c))));
    isum1 = _mm256_add_epi32(
        isum1, _mm256_madd_epi16(p1, _mm256_shuffle_epi8(sc16, bcast16_ctrl(2 * c + 1))));
  }
  *isum = _mm256_add_epi32(isum0, isum1);
}

// Q6_K: unsigned 6-bit quants in maddubs; the -32 offset is 32*sum_j(sc_j*bsum_j), exact.
// The lanes sum to I = sum_j sc_j * dot_j with the signed quants.
SIEVE_AVX2_INLINE __m256i q6k(const qblock::BlockQ6_K& a, const qblock::BlockQ8_K& b) {
  const __m256i sc16 =
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.scales)));
  __m256i isum = _mm256_slli_epi32(_mm256_madd_epi16(simd::loadu(b.bsums), sc16), 5);
  isum = _mm256_sub_epi32(_mm256_setzero_si256(), isum);
  // [sc0..7 | sc0..7] and [sc8..15 | sc8..15]: run k of half h takes sc[8h+2k] (first 16
  // elements, low 128 bits) and sc[8h+2k+1] (high 128 bits).
  const __m256i halves[2] = {_mm256_permute4x64_epi64(sc16, 0x44),
                             _mm256_permute4x64_epi64(sc16, 0xEE)};
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i q[4];
    simd::q6_half(a.ql + 64 * h, a.qh + 32 * h, q);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i p = _mm256_maddubs_epi16(q[k], simd::loadu(b.qs + 128 * h + 32 * k));
      const __m256i ctrl =
          _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(((4 * k + 3) << 8) | (4 * k + 2))),
                           _mm_set1_epi16(static_cast<int16_t>(((4 * k + 1) << 8) | (4 * k))));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(halves[h], ctrl)));
    }
  }
  return isum;
}

}  // namespace sieve::cpu::kdot

#endif  // SIEVE_HAVE_AVX2_BUILD

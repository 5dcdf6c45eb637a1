// AVX2 integer GEMM for quantized weights (see matmul_gemm.h for the scheme).
//
// Per tile of kR weight rows x kG groups (8 activation rows each), for every 32-element
// block: 8 broadcasts of 4 unpacked weight bytes, 8 maddubs against interleaved activations
// summed in int16 (as many as cannot overflow), one madd to int32, then one convert and one
// FMA with d_w * d_x for 8 activation rows. Integer sums equal the scalar kernels' exactly,
// and per lane the float chain is the dot-product order of quant.h (so is the decode path's).
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/matmul_gemm.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/simd_avx2.h"
#include "core/assert.h"
#include "core/fp16.h"

namespace sieve::cpu {
namespace {

using namespace qblock;

// 8 activation rows x one 32-element block.
struct PackedQ8x8 {
  int8_t qs[8][8][4];  // [slice k][row][elements 4k..4k+3]
  float d[8];          // row scale (the fp16 d as f32)
  int32_t aux[8];      // Q8_0: sum of the row's quants; Q8_1: s (fp16 -> f32 bits)
};
static_assert(sizeof(PackedQ8x8) == 320);

// 8 activation rows x one 256-element super-block.
struct PackedQ8Kx8 {
  int8_t qs[64][8][4];
  float d[8];
  int32_t bsum32[4][8];  // int16 pair (sum of 32-sub-block 2p, of 2p+1) per row
  int32_t bsum16[8][8];  // int16 pair (bsums[2p], bsums[2p+1]) per row
};
static_assert(sizeof(PackedQ8Kx8) == 2464);

enum class Kind { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, None };

Kind kind_of(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return Kind::Q4_0;
    case GgmlType::Q4_1:
      return Kind::Q4_1;
    case GgmlType::Q5_0:
      return Kind::Q5_0;
    case GgmlType::Q5_1:
      return Kind::Q5_1;
    case GgmlType::Q8_0:
      return Kind::Q8_0;
    case GgmlType::Q4_K:
      return Kind::Q4_K;
    case GgmlType::Q5_K:
      return Kind::Q5_K;
    case GgmlType::Q6_K:
      return Kind::Q6_K;
    default:
      return Kind::None;
  }
}

constexpr bool is_k(Kind k) {
  return k == Kind::Q4_K || k == Kind::Q5_K || k == Kind::Q6_K;
}

inline uint32_t pack16(int a, int b) {
  return static_cast<uint32_t>(static_cast<uint16_t>(a)) |
         (static_cast<uint32_t>(static_cast<uint16_t>(b)) << 16);
}

// Tile shape: weight rows x activation groups. 4 x 2 keeps 8 int16 accumulators, 2 activation
// vectors, 1 weight broadcast and the madd constant in registers (the 8 float accumulators
// live in L1; they are touched once per block). Per 4-element slice: 2 activation loads and
// 4 broadcasts feed 8 maddubs. Interleaved timing on the Zen 3 target: 4x2 was 5-10% ahead of
// 2x2, 3x2, 2x3 and 4x1 on Q4_1, Q5_0, Q4_K, Q6_K and Q8_0 (m = 512; A/B rounds of CPU time,
// the machine being shared). SIEVE_GEMM_R/G/ACT_KB exist only for tuning experiments.
#ifndef SIEVE_GEMM_R
#define SIEVE_GEMM_R 4
#endif
#ifndef SIEVE_GEMM_G
#define SIEVE_GEMM_G 2
#endif
constexpr int kR = SIEVE_GEMM_R;
constexpr int kG = SIEVE_GEMM_G;
// Activation rows re-read per weight tile are blocked to stay in L2 (512 KiB on Zen 3).
#ifndef SIEVE_GEMM_ACT_KB
#define SIEVE_GEMM_ACT_KB 160
#endif
constexpr size_t kActBlockBytes = SIEVE_GEMM_ACT_KB * 1024;

size_t align32(size_t n) {
  return (n + 31) & ~size_t{31};
}

// Unpacked weight row: unsigned quants in element order plus the scales in the forms the
// kernels consume.
struct RowBuf {
  uint8_t* q;      // [n_cols] unsigned quants (|w| for Q8_0)
  int8_t* sg;      // [n_cols] Q8_0 only: signed quants (sign source)
  float* d;        // [nblk]
  float* aux;      // [nblk] m (Q4_1/Q5_1) or dmin (Q4_K/Q5_K)
  int32_t* sc;     // [nblk][16] K: int16 pair (sc, sc) per scale group (8 of 32 or 16 of 16)
  int32_t* pairs;  // [nblk][8] K: (m_2p, m_2p+1) for Q4_K/Q5_K, (sc_2p, sc_2p+1) for Q6_K
};

size_t row_buf_bytes(int64_t n_cols) {
  const int64_t nblk = n_cols / 32;  // upper bound for the K-quant count too
  return 2 * align32(static_cast<size_t>(n_cols)) + 2 * align32(nblk * 4) + align32(nblk * 64) +
         align32(nblk * 32);
}

RowBuf carve_row_buf(uint8_t* p, int64_t n_cols) {
  const int64_t nblk = n_cols / 32;
  RowBuf b;
  b.q = p;
  p += align32(n_cols);
  b.sg = reinterpret_cast<int8_t*>(p);
  p += align32(n_cols);
  b.d = reinterpret_cast<float*>(p);
  p += align32(nblk * 4);
  b.aux = reinterpret_cast<float*>(p);
  p += align32(nblk * 4);
  b.sc = reinterpret_cast<int32_t*>(p);
  p += align32(nblk * 64);
  b.pairs = reinterpret_cast<int32_t*>(p);
  return b;
}

#if SIEVE_HAVE_AVX2_BUILD

// ---------------------------------------------------------------- weight unpacking

template <Kind K>
SIEVE_AVX2 void unpack_row(const uint8_t* src, int64_t n_cols, const RowBuf& rb) {
  if constexpr (!is_k(K)) {
    for (int64_t b = 0; b < n_cols / 32; ++b) {
      __m256i q;
      if constexpr (K == Kind::Q4_0) {
        const auto& blk = reinterpret_cast<const BlockQ4_0*>(src)[b];
        q = simd::nibbles_to_bytes(blk.qs);
        rb.d[b] = simd::h2f(blk.d);
      } else if constexpr (K == Kind::Q4_1) {
        const auto& blk = reinterpret_cast<const BlockQ4_1*>(src)[b];
        q = simd::nibbles_to_bytes(blk.qs);
        rb.d[b] = simd::h2f(blk.d);
        rb.aux[b] = simd::h2f(blk.m);
      } else if constexpr (K == Kind::Q5_0) {
        const auto& blk = reinterpret_cast<const BlockQ5_0*>(src)[b];
        q = simd::q5_bytes(blk.qs, blk.qh);
        rb.d[b] = simd::h2f(blk.d);
      } else if constexpr (K == Kind::Q5_1) {
        const auto& blk = reinterpret_cast<const BlockQ5_1*>(src)[b];
        q = simd::q5_bytes(blk.qs, blk.qh);
        rb.d[b] = simd::h2f(blk.d);
        rb.aux[b] = simd::h2f(blk.m);
      } else {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(src)[b];
        const __m256i v = simd::loadu(blk.qs);
        _mm256_store_si256(reinterpret_cast<__m256i*>(rb.sg + 32 * b), v);
        q = _mm256_sign_epi8(v, v);  // |v|; -128 stays 0x80 = 128 unsigned
        rb.d[b] = simd::h2f(blk.d);
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(rb.q + 32 * b), q);
    }
  } else {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < n_cols / 256; ++b) {
      uint8_t* q = rb.q + 256 * b;
      int32_t* sc = rb.sc + 16 * b;
      int32_t* pairs = rb.pairs + 8 * b;
      if constexpr (K == Kind::Q6_K) {
        const auto& blk = reinterpret_cast<const BlockQ6_K*>(src)[b];
        for (int h = 0; h < 2; ++h) {
          __m256i v[4];
          simd::q6_half(blk.ql + 64 * h, blk.qh + 32 * h, v);
          for (int k = 0; k < 4; ++k)
            _mm256_store_si256(reinterpret_cast<__m256i*>(q + 128 * h + 32 * k), v[k]);
        }
        for (int j = 0; j < 16; ++j)
          sc[j] = static_cast<int32_t>(pack16(blk.scales[j], blk.scales[j]));
        for (int p = 0; p < 8; ++p)
          pairs[p] = static_cast<int32_t>(pack16(blk.scales[2 * p], blk.scales[2 * p + 1]));
        rb.d[b] = simd::h2f(blk.d);
      } else {
        const uint8_t* scales;
        const uint8_t* qs;
        __m256i hbits = _mm256_setzero_si256();
        if constexpr (K == Kind::Q5_K) {
          const auto& blk = reinterpret_cast<const BlockQ5_K*>(src)[b];
          scales = blk.scales, qs = blk.qs, hbits = simd::loadu(blk.qh);
          rb.d[b] = simd::h2f(blk.d), rb.aux[b] = simd::h2f(blk.dmin);
        } else {
          const auto& blk = reinterpret_cast<const BlockQ4_K*>(src)[b];
          scales = blk.scales, qs = blk.qs;
          rb.d[b] = simd::h2f(blk.d), rb.aux[b] = simd::h2f(blk.dmin);
        }
        for (int c = 0; c < 4; ++c) {
          const __m256i v = simd::loadu(qs + 32 * c);
          __m256i lo = _mm256_and_si256(v, m4);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          if constexpr (K == Kind::Q5_K) {
            const __m256i one = _mm256_set1_epi8(1);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
            hi = _mm256_or_si256(
                hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
            hbits = _mm256_srli_epi16(hbits, 2);
          }
          _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * c), lo);
          _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * c + 32), hi);
        }
        uint8_t s[8], m[8];
        for (int j = 0; j < 8; ++j) scale_min_k4(j, scales, &s[j], &m[j]);
        for (int j = 0; j < 8; ++j) sc[j] = static_cast<int32_t>(pack16(s[j], s[j]));
        for (int p = 0; p < 4; ++p) pairs[p] = static_cast<int32_t>(pack16(m[2 * p], m[2 * p + 1]));
      }
    }
  }
}

// ---------------------------------------------------------------- tile kernels

SIEVE_AVX2_INLINE __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

SIEVE_AVX2_INLINE __m256i load_a(const void* p) {
  return _mm256_load_si256(static_cast<const __m256i*>(p));
}

// An activation vector that is used by all kR weight rows: loaded once into a register (the
// barrier stops GCC from re-loading it as a memory operand of every maddubs, which would make
// the loop bound by loads rather than by maddubs on Zen 3).
SIEVE_AVX2_INLINE __m256i load_x(const void* p) {
  __m256i v = _mm256_load_si256(static_cast<const __m256i*>(p));
  __asm__("" : "+x"(v));
  return v;
}

// a + b, kept as a serial chain: without the barrier GCC re-associates the int16 sums into a
// tree that needs every maddubs result live at once and spills half of them to the stack.
SIEVE_AVX2_INLINE __m256i add16_chain(__m256i a, __m256i b) {
  __m256i s = _mm256_add_epi16(a, b);
  __asm__("" : "+x"(s));
  return s;
}
SIEVE_AVX2_INLINE __m256i add32_chain(__m256i a, __m256i b) {
  __m256i s = _mm256_add_epi32(a, b);
  __asm__("" : "+x"(s));
  return s;
}

// out: [R][G][8] (8 activation rows of each group).
template <Kind K, int R, int G>
SIEVE_AVX2 void tile_legacy(const RowBuf* w, const uint8_t* const* xg, int64_t nb, float* out) {
  __m256 acc[R][G];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);

  for (int64_t b = 0; b < nb; ++b) {
    const PackedQ8x8* x[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) x[g] = reinterpret_cast<const PackedQ8x8*>(xg[g]) + b;
    __m256i isum[R][G];

    if constexpr (K == Kind::Q8_0) {
      // Signed weights: |w| as the unsigned operand, the activation takes w's sign. Pair
      // sums reach 2*128*127, so each maddubs goes to int32 on its own.
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) isum[r][g] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m256i xv[G];
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) xv[g] = load_x(x[g]->qs[k]);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256i wa = bcast4(w[r].q + 32 * b + 4 * k);
          const __m256i ws = bcast4(w[r].sg + 32 * b + 4 * k);
#pragma GCC unroll 4
          for (int g = 0; g < G; ++g) {
            const __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv[g], ws));
            isum[r][g] = add32_chain(isum[r][g], _mm256_madd_epi16(p, ones));
          }
        }
      }
    } else {
      // 4-bit quants: 8 pair sums of at most 2*15*127 fit int16; 5-bit: 4 of 2*31*127.
      constexpr int kPerI16 = (K == Kind::Q4_0 || K == Kind::Q4_1) ? 8 : 4;
#pragma GCC unroll 2
      for (int h = 0; h < 8 / kPerI16; ++h) {
        __m256i a16[R][G];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int g = 0; g < G; ++g) a16[r][g] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int kk = 0; kk < kPerI16; ++kk) {
          const int k = h * kPerI16 + kk;
          __m256i xv[G];
#pragma GCC unroll 4
          for (int g = 0; g < G; ++g) xv[g] = load_x(x[g]->qs[k]);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            const __m256i wv = bcast4(w[r].q + 32 * b + 4 * k);
#pragma GCC unroll 4
            for (int g = 0; g < G; ++g)
              a16[r][g] = add16_chain(a16[r][g], _mm256_maddubs_epi16(wv, xv[g]));
          }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int g = 0; g < G; ++g) {
            const __m256i s = _mm256_madd_epi16(a16[r][g], ones);
            isum[r][g] = h == 0 ? s : _mm256_add_epi32(isum[r][g], s);
          }
      }
    }

    if constexpr (K == Kind::Q4_0 || K == Kind::Q5_0) {
      // Weights are stored unsigned: subtract offset * sum(x) per row (exact in int32).
      constexpr int kShift = K == Kind::Q4_0 ? 3 : 4;
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m256i off = _mm256_slli_epi32(load_a(x[g]->aux), kShift);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) isum[r][g] = _mm256_sub_epi32(isum[r][g], off);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 dw = _mm256_set1_ps(w[r].d[b]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m256 scale = _mm256_mul_ps(dw, _mm256_load_ps(x[g]->d));
        acc[r][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][g]), scale, acc[r][g]);
      }
    }
    if constexpr (K == Kind::Q4_1 || K == Kind::Q5_1) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 mw = _mm256_set1_ps(w[r].aux[b]);
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
          acc[r][g] = _mm256_fmadd_ps(mw, _mm256_castsi256_ps(load_a(x[g]->aux)), acc[r][g]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(out + (r * G + g) * 8, acc[r][g]);
}

// K-quants: int16 partial sums are scaled by the sub-block scales inside madd and summed in
// int32 over the super-block; one float FMA per super-block and row group.
template <Kind K, int R, int G>
SIEVE_AVX2 void tile_k(const RowBuf* w, const uint8_t* const* xg, int64_t nsb, float* out) {
  __m256 acc[R][G];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();

  // Slices of 4 elements per scale group, and per int16 partial sum (u4: 8, u5: 4, u6: 2).
  constexpr int kGroupSlices = K == Kind::Q6_K ? 4 : 8;
  constexpr int kPerI16 = K == Kind::Q4_K ? 8 : (K == Kind::Q5_K ? 4 : 2);
  constexpr int kGroups = 64 / kGroupSlices;

  for (int64_t sb = 0; sb < nsb; ++sb) {
    const PackedQ8Kx8* x[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) x[g] = reinterpret_cast<const PackedQ8Kx8*>(xg[g]) + sb;
    __m256i isum[R][G];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) isum[r][g] = _mm256_setzero_si256();

    for (int j = 0; j < kGroups; ++j) {
      __m256i scv[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) scv[r] = _mm256_set1_epi32(w[r].sc[16 * sb + j]);
#pragma GCC unroll 4
      for (int h = 0; h < kGroupSlices / kPerI16; ++h) {
        __m256i a16[R][G];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int g = 0; g < G; ++g) a16[r][g] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int kk = 0; kk < kPerI16; ++kk) {
          const int k = j * kGroupSlices + h * kPerI16 + kk;
          __m256i xv[G];
#pragma GCC unroll 4
          for (int g = 0; g < G; ++g) xv[g] = load_x(x[g]->qs[k]);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            const __m256i wv = bcast4(w[r].q + 256 * sb + 4 * k);
#pragma GCC unroll 4
            for (int g = 0; g < G; ++g)
              a16[r][g] = add16_chain(a16[r][g], _mm256_maddubs_epi16(wv, xv[g]));
          }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int g = 0; g < G; ++g)
            isum[r][g] = add32_chain(isum[r][g], _mm256_madd_epi16(a16[r][g], scv[r]));
      }
    }

#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int32_t* pr = w[r].pairs + 8 * sb;
      const __m256 dw = _mm256_set1_ps(w[r].d[sb]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m256 dx = _mm256_load_ps(x[g]->d);
        if constexpr (K == Kind::Q6_K) {
          // q - 32: subtract 32 * sum_j sc_j * bsum16_j.
          __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int p = 0; p < 8; ++p) {
            corr = _mm256_add_epi32(
                corr, _mm256_madd_epi16(_mm256_set1_epi32(pr[p]), load_a(x[g]->bsum16[p])));
          }
          const __m256i s = _mm256_sub_epi32(isum[r][g], _mm256_slli_epi32(corr, 5));
          acc[r][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx), acc[r][g]);
        } else {
          __m256i imin = _mm256_setzero_si256();
#pragma GCC unroll 4
          for (int p = 0; p < 4; ++p) {
            imin = _mm256_add_epi32(
                imin, _mm256_madd_epi16(_mm256_set1_epi32(pr[p]), load_a(x[g]->bsum32[p])));
          }
          const __m256 dmin = _mm256_set1_ps(w[r].aux[sb]);
          acc[r][g] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][g]), _mm256_mul_ps(dw, dx), acc[r][g]);
          acc[r][g] =
              _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, dx), acc[r][g]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(out + (r * G + g) * 8, acc[r][g]);
}

template <Kind K, int R, int G>
SIEVE_AVX2 void tile(const RowBuf* w, const uint8_t* const* xg, int64_t nblk, float* out) {
  if constexpr (is_k(K)) {
    tile_k<K, R, G>(w, xg, nblk, out);
  } else {
    tile_legacy<K, R, G>(w, xg, nblk, out);
  }
}

using tile_fn = void (*)(const RowBuf*, const uint8_t* const*, int64_t, float*);

template <Kind K, int R, int... Gs>
constexpr std::array<tile_fn, sizeof...(Gs)> tile_row(std::integer_sequence<int, Gs...>) {
  return {&tile<K, R, Gs + 1>...};
}

template <Kind K, int... Rs>
constexpr std::array<std::array<tile_fn, kG>, kR> tile_table(std::integer_sequence<int, Rs...>) {
  return {tile_row<K, Rs + 1>(std::make_integer_sequence<int, kG>{})...};
}

template <Kind K>
SIEVE_AVX2 void gemm_rows_kind(GgmlType t, const uint8_t* w, int64_t n_cols, int64_t r_begin,
                               int64_t r_end, const uint8_t* packed, int64_t m, float* y,
                               int64_t ldy, uint8_t* scratch) {
  static constexpr auto kTiles = tile_table<K>(std::make_integer_sequence<int, kR>{});
  const int64_t nblk = n_cols / (is_k(K) ? 256 : 32);
  const size_t wrow = static_cast<size_t>(row_bytes(t, n_cols));
  const size_t gbytes = gemm_group_bytes(t, n_cols);
  const int64_t n_groups = (m + kGemmGroupRows - 1) / kGemmGroupRows;
  int64_t mb = std::max<int64_t>(kG, static_cast<int64_t>(kActBlockBytes / gbytes) / kG * kG);

  RowBuf rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = carve_row_buf(scratch + r * row_buf_bytes(n_cols), n_cols);
  alignas(32) float out[kR * kG * 8];

  for (int64_t gb = 0; gb < n_groups; gb += mb) {
    const int64_t ge = std::min(n_groups, gb + mb);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kR) {
      const int rr = static_cast<int>(std::min<int64_t>(kR, r_end - r0));
      for (int r = 0; r < rr; ++r) unpack_row<K>(w + (r0 + r) * wrow, n_cols, rows[r]);
      for (int64_t g0 = gb; g0 < ge; g0 += kG) {
        const int gg = static_cast<int>(std::min<int64_t>(kG, ge - g0));
        const uint8_t* xg[kG];
        for (int g = 0; g < gg; ++g) xg[g] = packed + (g0 + g) * gbytes;
        kTiles[rr - 1][gg - 1](rows, xg, nblk, out);
        for (int r = 0; r < rr; ++r) {
          for (int g = 0; g < gg; ++g) {
            const int64_t row0 = (g0 + g) * kGemmGroupRows;
            const int n_valid = static_cast<int>(std::min<int64_t>(kGemmGroupRows, m - row0));
            const float* o = out + (r * gg + g) * 8;
            for (int i = 0; i < n_valid; ++i) y[(row0 + i) * ldy + r0 + r] = o[i];
          }
        }
      }
    }
  }
}

// 4 weight rows x 2 activation rows of f32: 8 accumulators, 6 loads per 8 FMAs.
template <int R, int M>
SIEVE_AVX2 void f32_tile(const float* wf, const float* xf, int64_t n, float* out /* [M][R] */) {
  __m256 acc[R][M];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int i = 0; i < M; ++i) acc[r][i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 xv[M];
#pragma GCC unroll 2
    for (int i = 0; i < M; ++i) xv[i] = _mm256_loadu_ps(xf + i * n + c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_loadu_ps(wf + r * n + c);
#pragma GCC unroll 2
      for (int i = 0; i < M; ++i) acc[r][i] = _mm256_fmadd_ps(wv, xv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) {
      float s = simd::hsum(acc[r][i]);
      for (int64_t cc = c; cc < n; ++cc) s = simd::fma_ss(wf[r * n + cc], xf[i * n + cc], s);
      out[i * R + r] = s;
    }
  }
}

template <int R>
SIEVE_AVX2 void f32_rows(const float* wf, const float* xf, int64_t m, int64_t n, float* y,
                         int64_t ldy) {
  float out[2 * R];
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) {
    f32_tile<R, 2>(wf, xf + i * n, n, out);
    for (int ii = 0; ii < 2; ++ii)
      for (int r = 0; r < R; ++r) y[(i + ii) * ldy + r] = out[ii * R + r];
  }
  if (i < m) {
    f32_tile<R, 1>(wf, xf + i * n, n, out);
    for (int r = 0; r < R; ++r) y[i * ldy + r] = out[r];
  }
}

// Float weights at m == 1, read in place (F16/BF16 converted on the fly, exactly as
// dequantization does): R rows against one activation row, the same chain per row as f32_tile.
struct WF32 {
  static SIEVE_AVX2_INLINE __m256 v8(const uint8_t* p, int64_t c) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + c);
  }
  static SIEVE_AVX2_INLINE float s(const uint8_t* p, int64_t c) {
    float v;
    std::memcpy(&v, p + 4 * c, 4);
    return v;
  }
};
template <bool kBf16>
struct WHalf {
  static SIEVE_AVX2_INLINE __m256 v8(const uint8_t* p, int64_t c) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * c));
    if constexpr (kBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
    } else {
      return _mm256_cvtph_ps(v);
    }
  }
  static SIEVE_AVX2_INLINE float s(const uint8_t* p, int64_t c) {
    uint16_t h;
    std::memcpy(&h, p + 2 * c, 2);
    return kBf16 ? bf16_to_f32(h) : fp16_to_f32(h);
  }
};

template <class WL, int R>
SIEVE_AVX2 void float_gemv_tile(const uint8_t* w, size_t wrow, const float* xf, int64_t n,
                                float* y) {
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 xv = _mm256_loadu_ps(xf + c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(WL::v8(w + r * wrow, c), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float s = simd::hsum(acc[r]);
    for (int64_t cc = c; cc < n; ++cc) s = simd::fma_ss(WL::s(w + r * wrow, cc), xf[cc], s);
    y[r] = s;
  }
}

template <class WL>
SIEVE_AVX2 void float_gemv_rows(const uint8_t* w, size_t wrow, int64_t r_begin, int64_t r_end,
                                const float* xf, int64_t n, float* y) {
  int64_t r = r_begin;
  for (; r + 4 <= r_end; r += 4) float_gemv_tile<WL, 4>(w + r * wrow, wrow, xf, n, y + r);
  for (; r < r_end; ++r) float_gemv_tile<WL, 1>(w + r * wrow, wrow, xf, n, y + r);
}

#endif  // SIEVE_HAVE_AVX2_BUILD

}  // namespace

bool gemm_q8_supported(GgmlType t) {
  return kind_of(t) != Kind::None;
}

size_t gemm_group_bytes(GgmlType t, int64_t n_cols) {
  return is_k(kind_of(t)) ? static_cast<size_t>(n_cols / 256) * sizeof(PackedQ8Kx8)
                          : static_cast<size_t>(n_cols / 32) * sizeof(PackedQ8x8);
}

size_t gemm_tile_scratch_bytes(GgmlType, int64_t n_cols) {
  return kR * row_buf_bytes(n_cols);
}

int gemm_tile_rows() {
  return kR;
}

void gemm_pack_group(GgmlType t, const uint8_t* xq, size_t xq_stride, int rows, int64_t n_cols,
                     uint8_t* dst) {
  const Kind k = kind_of(t);
  SIEVE_ASSERT(k != Kind::None && rows >= 1 && rows <= kGemmGroupRows);
  if (!is_k(k)) {
    const bool q81 = k == Kind::Q4_1 || k == Kind::Q5_1;
    const size_t blk_bytes = q81 ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0);
    for (int64_t b = 0; b < n_cols / 32; ++b) {
      auto& p = reinterpret_cast<PackedQ8x8*>(dst)[b];
      if (rows < kGemmGroupRows) std::memset(&p, 0, sizeof(p));
      for (int i = 0; i < rows; ++i) {
        const uint8_t* blk = xq + i * xq_stride + b * blk_bytes;
        const int8_t* qs;
        if (q81) {
          const auto* q = reinterpret_cast<const BlockQ8_1*>(blk);
          qs = q->qs;
          p.d[i] = fp16_to_f32(q->d);
          p.aux[i] = static_cast<int32_t>(f32_to_bits(fp16_to_f32(q->s)));
        } else {
          const auto* q = reinterpret_cast<const BlockQ8_0*>(blk);
          qs = q->qs;
          p.d[i] = fp16_to_f32(q->d);
          int sum = 0;
          for (int j = 0; j < 32; ++j) sum += qs[j];
          p.aux[i] = sum;
        }
        for (int s = 0; s < 8; ++s) std::memcpy(p.qs[s][i], qs + 4 * s, 4);
      }
    }
  } else {
    for (int64_t b = 0; b < n_cols / 256; ++b) {
      auto& p = reinterpret_cast<PackedQ8Kx8*>(dst)[b];
      if (rows < kGemmGroupRows) std::memset(&p, 0, sizeof(p));
      for (int i = 0; i < rows; ++i) {
        const auto* q = reinterpret_cast<const BlockQ8_K*>(xq + i * xq_stride) + b;
        p.d[i] = q->d;
        for (int s = 0; s < 64; ++s) std::memcpy(p.qs[s][i], q->qs + 4 * s, 4);
        const int16_t* bs = q->bsums;
        for (int pi = 0; pi < 4; ++pi) {
          p.bsum32[pi][i] = static_cast<int32_t>(
              pack16(bs[4 * pi] + bs[4 * pi + 1], bs[4 * pi + 2] + bs[4 * pi + 3]));
        }
        for (int pi = 0; pi < 8; ++pi)
          p.bsum16[pi][i] = static_cast<int32_t>(pack16(bs[2 * pi], bs[2 * pi + 1]));
      }
    }
  }
}

#if SIEVE_HAVE_AVX2_BUILD
void gemm_rows_avx2(GgmlType t, const uint8_t* w, int64_t n_cols, int64_t r_begin, int64_t r_end,
                    const uint8_t* packed, int64_t m, float* y, int64_t ldy, uint8_t* scratch) {
  switch (kind_of(t)) {
    case Kind::Q4_0:
      return gemm_rows_kind<Kind::Q4_0>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::Q4_1:
      return gemm_rows_kind<Kind::Q4_1>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::Q5_0:
      return gemm_rows_kind<Kind::Q5_0>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::Q5_1:
      return gemm_rows_kind<Kind::Q5_1>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::Q8_0:
      return gemm_rows_kind<Kind::Q8_0>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::Q4_K:
      return gemm_rows_kind<Kind::Q4_K>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::Q5_K:
      return gemm_rows_kind<Kind::Q5_K>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::Q6_K:
      return gemm_rows_kind<Kind::Q6_K>(t, w, n_cols, r_begin, r_end, packed, m, y, ldy, scratch);
    case Kind::None:
      break;
  }
  SIEVE_ASSERT(false && "gemm_rows_avx2: unsupported type");
}

void gemm_f32_rows_avx2(const float* wf, int rr, const float* xf, int64_t m, int64_t n, float* y,
                        int64_t ldy) {
  switch (rr) {
    case 1:
      return f32_rows<1>(wf, xf, m, n, y, ldy);
    case 2:
      return f32_rows<2>(wf, xf, m, n, y, ldy);
    case 3:
      return f32_rows<3>(wf, xf, m, n, y, ldy);
    case 4:
      return f32_rows<4>(wf, xf, m, n, y, ldy);
    default:
      SIEVE_ASSERT(false && "gemm_f32_rows_avx2: 1..4 rows");
  }
}
void gemv_float_rows_avx2(GgmlType t, const uint8_t* w, int64_t n, int64_t r_begin, int64_t r_end,
                          const float* xf, float* y) {
  const size_t wrow = static_cast<size_t>(row_bytes(t, n));
  switch (t) {
    case GgmlType::F32:
      return float_gemv_rows<WF32>(w, wrow, r_begin, r_end, xf, n, y);
    case GgmlType::F16:
      return float_gemv_rows<WHalf<false>>(w, wrow, r_begin, r_end, xf, n, y);
    case GgmlType::BF16:
      return float_gemv_rows<WHalf<true>>(w, wrow, r_begin, r_end, xf, n, y);
    default:
      SIEVE_ASSERT(false && "gemv_float_rows_avx2: F32/F16/BF16 only");
  }
}
#else
void gemv_float_rows_avx2(GgmlType, const uint8_t*, int64_t, int64_t, int64_t, const float*,
                          float*) {
  SIEVE_ASSERT(false && "gemv_float_rows_avx2: built without AVX2 support");
}
void gemm_rows_avx2(GgmlType, const uint8_t*, int64_t, int64_t, int64_t, const uint8_t*, int64_t,
                    float*, int64_t, uint8_t*) {
  SIEVE_ASSERT(false && "gemm_rows_avx2: built without AVX2 support");
}
void gemm_f32_rows_avx2(const float*, int, const float*, int64_t, int64_t, float*, int64_t) {
  SIEVE_ASSERT(false && "gemm_f32_rows_avx2: built without AVX2 support");
}
#endif

}  // namespace sieve::cpu

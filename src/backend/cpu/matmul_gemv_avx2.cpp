// AVX2 decode kernels (m == 1) for the legacy 32-blocks: one weight row against one
// activation row, bound by the weight stream.
//
// What makes them faster than vec_dot: the activation row is prepared once per matmul call
// (quants contiguous, d and s as f32 arrays, Q4_0/Q5_0 offsets as ready int16 pair sums), and
// the weight scales of 8 blocks are fetched with integer loads and converted with one
// vcvtph2ps, so the per-block work is the unpack, maddubs, madd, convert and one FMA.
// K-quant rows go through vec_dot (their scale work is per 256 elements already).
#include <algorithm>
#include <cstring>

#include "backend/cpu/matmul_gemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/simd_avx2.h"
#include "core/assert.h"
#include "core/fp16.h"

namespace sieve::cpu {
namespace {

using namespace qblock;

bool is_legacy(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
         t == GgmlType::Q8_0;
}

size_t align64(size_t n) {
  return (n + 63) & ~size_t{63};
}

// Prepared activation row (legacy types), carved from one buffer:
//   row  : the ggml-layout quantized row (what vec_dot would see)
//   qs   : [n] int8, contiguous
//   d    : [nb8] f32 (nb rounded up to 8, zero padded)
//   s    : [nb8] f32, Q8_1 only: fp16 s as f32
//   off  : [nb][16] int16, Q4_0/Q5_0 only: offset * (pair sums of qs), i.e. what
//          maddubs(offset, y) would give
struct GemvAct {
  const uint8_t* row;
  int8_t* qs;
  float* d;
  float* s;
  int16_t* off;
};

GemvAct carve(GgmlType t, int64_t n, uint8_t* p) {
  const int64_t nb = n / 32, nb8 = (nb + 7) / 8 * 8;
  GemvAct a{};
  a.row = p;
  p += align64(activation_row_bytes(t, n));
  a.qs = reinterpret_cast<int8_t*>(p);
  p += align64(n);
  a.d = reinterpret_cast<float*>(p);
  p += align64(nb8 * 4);
  a.s = reinterpret_cast<float*>(p);
  p += align64(nb8 * 4);
  a.off = reinterpret_cast<int16_t*>(p);
  return a;
}

size_t act_bytes(GgmlType t, int64_t n) {
  const int64_t nb = n / 32, nb8 = (nb + 7) / 8 * 8;
  return align64(activation_row_bytes(t, n)) + align64(n) + 2 * align64(nb8 * 4) + align64(nb * 32);
}

#if SIEVE_HAVE_AVX2_BUILD

inline uint64_t ld16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// 8 fp16 values at p, p + S, ..., p + 7S -> 8 f32. Integer loads and shifts
// run on the scalar ALUs, which the vector-bound loop leaves idle.
template <size_t S>
SIEVE_AVX2_INLINE __m256 gather_f16(const uint8_t* p) {
  const uint64_t lo = ld16(p) | ld16(p + S) << 16 | ld16(p + 2 * S) << 32 | ld16(p + 3 * S) << 48;
  const uint64_t hi =
      ld16(p + 4 * S) | ld16(p + 5 * S) << 16 | ld16(p + 6 * S) << 32 | ld16(p + 7 * S) << 48;
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)));
}

template <GgmlType T>
struct Legacy;
template <>
struct Legacy<GgmlType::Q4_0> {
  using B = BlockQ4_0;
  static constexpr bool kMin = false;
};
template <>
struct Legacy<GgmlType::Q4_1> {
  using B = BlockQ4_1;
  static constexpr bool kMin = true;
};
template <>
struct Legacy<GgmlType::Q5_0> {
  using B = BlockQ5_0;
  static constexpr bool kMin = false;
};
template <>
struct Legacy<GgmlType::Q5_1> {
  using B = BlockQ5_1;
  static constexpr bool kMin = true;
};
template <>
struct Legacy<GgmlType::Q8_0> {
  using B = BlockQ8_0;
  static constexpr bool kMin = false;
};

// Exact int32 partial dots (8 lanes summing to the block's integer dot).
template <GgmlType T>
SIEVE_AVX2_INLINE __m256i block_dot(const typename Legacy<T>::B& b, const int8_t* y,
                                    const int16_t* off) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i yv = simd::loadu(y);
  if constexpr (T == GgmlType::Q8_0) {
    return simd::dot_s8s8(simd::loadu(b.qs), yv);
  } else {
    __m256i q;
    if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1) {
      q = simd::nibbles_to_bytes(b.qs);
    } else {
      q = simd::q5_bytes(b.qs, b.qh);
    }
    __m256i p = _mm256_maddubs_epi16(q, yv);
    if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q5_0)
      p = _mm256_sub_epi16(p, simd::loadu(off));
    return _mm256_madd_epi16(p, ones);
  }
}

template <GgmlType T>
SIEVE_AVX2 float gemv_row(const uint8_t* w, const GemvAct& a, int64_t nb) {
  using B = typename Legacy<T>::B;
  constexpr size_t S = sizeof(B);
  // Four accumulators: each FMA waits on the previous one of its chain (4 cycles).
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  __m256 accm = _mm256_setzero_ps();
  alignas(32) float sc[8];
  const auto* blk = reinterpret_cast<const B*>(w);
  const int64_t nb8 = nb / 8 * 8;
  for (int64_t c = 0; c < nb8; c += 8) {
    const auto* bp = reinterpret_cast<const uint8_t*>(blk + c);
    const __m256 dw = gather_f16<S>(bp + offsetof(B, d));
    _mm256_store_ps(sc, _mm256_mul_ps(dw, _mm256_load_ps(a.d + c)));
    if constexpr (Legacy<T>::kMin) {
      const __m256 mw = gather_f16<S>(bp + offsetof(B, m));
      accm = _mm256_fmadd_ps(mw, _mm256_load_ps(a.s + c), accm);
    }
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
      const int64_t i = c + b;
      const __m256i p = block_dot<T>(blk[i], a.qs + 32 * i, a.off + 16 * i);
      acc[b & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(sc + b), acc[b & 3]);
    }
  }
  // Tail blocks (n_cols / 32 not a multiple of 8): scales one at a time, no gather.
  float summ = 0;
  for (int64_t i = nb8; i < nb; ++i) {
    const __m256i p = block_dot<T>(blk[i], a.qs + 32 * i, a.off + 16 * i);
    const __m256 scale = _mm256_set1_ps(simd::h2f(blk[i].d) * a.d[i]);
    acc[i & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[i & 3]);
    if constexpr (Legacy<T>::kMin) summ += simd::h2f(blk[i].m) * a.s[i];
  }
  acc[0] = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
  return simd::hsum(_mm256_add_ps(acc[0], accm)) + summ;
}

template <GgmlType T>
SIEVE_AVX2 void gemv_rows_t(const uint8_t* w, int64_t n, int64_t r_begin, int64_t r_end,
                            const GemvAct& a, float* y) {
  const size_t wrow = static_cast<size_t>(row_bytes(T, n));
  for (int64_t r = r_begin; r < r_end; ++r) y[r] = gemv_row<T>(w + r * wrow, a, n / 32);
}

#endif  // SIEVE_HAVE_AVX2_BUILD

}  // namespace

size_t gemv_act_bytes(GgmlType t, int64_t n) {
  return is_legacy(t) ? act_bytes(t, n) : activation_row_bytes(t, n);
}

void gemv_prepare(GgmlType t, const float* x, int64_t n, uint8_t* dst, const QuantKernels& k) {
  if (!is_legacy(t)) {
    k.quantize(x, dst, n);
    return;
  }
  const GemvAct a = carve(t, n, dst);
  k.quantize(x, const_cast<uint8_t*>(a.row), n);
  const int64_t nb = n / 32, nb8 = (nb + 7) / 8 * 8;
  const bool q81 = vec_dot_type(t) == GgmlType::Q8_1;
  const int off = t == GgmlType::Q4_0 ? 8 : (t == GgmlType::Q5_0 ? 16 : 0);
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qs;
    if (q81) {
      const auto& blk = reinterpret_cast<const BlockQ8_1*>(a.row)[b];
      qs = blk.qs;
      a.d[b] = fp16_to_f32(blk.d);
      a.s[b] = fp16_to_f32(blk.s);
    } else {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(a.row)[b];
      qs = blk.qs;
      a.d[b] = fp16_to_f32(blk.d);
      a.s[b] = 0;
    }
    std::memcpy(a.qs + 32 * b, qs, 32);
    if (off) {
      for (int j = 0; j < 16; ++j)
        a.off[16 * b + j] = static_cast<int16_t>(off * (qs[2 * j] + qs[2 * j + 1]));
    }
  }
  for (int64_t b = nb; b < nb8; ++b) a.d[b] = a.s[b] = 0;
}

void gemv_rows_avx2(GgmlType t, const uint8_t* w, int64_t n, int64_t r_begin, int64_t r_end,
                    const uint8_t* act, float* y, const QuantKernels& k) {
#if SIEVE_HAVE_AVX2_BUILD
  if (is_legacy(t)) {
    const GemvAct a = carve(t, n, const_cast<uint8_t*>(act));
    switch (t) {
      case GgmlType::Q4_0:
        return gemv_rows_t<GgmlType::Q4_0>(w, n, r_begin, r_end, a, y);
      case GgmlType::Q4_1:
        return gemv_rows_t<GgmlType::Q4_1>(w, n, r_begin, r_end, a, y);
      case GgmlType::Q5_0:
        return gemv_rows_t<GgmlType::Q5_0>(w, n, r_begin, r_end, a, y);
      case GgmlType::Q5_1:
        return gemv_rows_t<GgmlType::Q5_1>(w, n, r_begin, r_end, a, y);
      case GgmlType::Q8_0:
        return gemv_rows_t<GgmlType::Q8_0>(w, n, r_begin, r_end, a, y);
      default:
        break;
    }
  }
#endif
  const size_t wrow = static_cast<size_t>(row_bytes(t, n));
  for (int64_t r = r_begin; r < r_end; ++r) y[r] = k.vec_dot(w + r * wrow, act, n);
}

}  // namespace sieve::cpu

// AVX2 decode kernels (m == 1) for the legacy 32-blocks: weight rows against one activation
// row, bound by the weight stream.
//
// Batch invariance: a row's result must equal, bit for bit, what the GEMM (m > 1) gives for the
// same activation row, so the float work follows the dot-product order of quant.h: per block,
// one exact int32 dot, then acc = fma(float(I), d_w * d_x, acc) (and the min term). Here
// the lanes hold 8 weight rows (the GEMM's hold 8 activation rows): the 8 rows' int32 partial
// dots of a block are transposed and summed (hsum8_i32, exact), and one convert, one multiply
// and one FMA serve all 8 rows. The activation row is prepared once per call (quants
// contiguous, d and s as f32 arrays, Q4_0/Q5_0 offsets as ready int16 pair sums); the 8 rows'
// fp16 scales come with scalar loads and one vcvtph2ps.
// K-quants work the same way on the Q8_K row, per 256-element super-block (I and M per row).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul_gemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kdot_avx2.h"
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

// The fp16 values at p, p + S, ..., p + 7S -> 8 f32. Integer loads and shifts run on the
// scalar ALUs, which the vector-bound loop leaves idle.
SIEVE_AVX2_INLINE __m256 gather_f16(const uint8_t* p, size_t S) {
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

// Exact int32 partial dots (8 lanes summing to the block's integer dot). yv: the activation
// quants of the block; off: its offset pair sums (Q4_0/Q5_0).
template <GgmlType T>
SIEVE_AVX2_INLINE __m256i block_dot(const typename Legacy<T>::B& b, __m256i yv, __m256i off) {
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
    if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q5_0) p = _mm256_sub_epi16(p, off);
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  }
}

template <GgmlType T>
SIEVE_AVX2_INLINE __m256i row_dot(const uint8_t* blk, __m256i yv, __m256i off) {
  return block_dot<T>(*reinterpret_cast<const typename Legacy<T>::B*>(blk), yv, off);
}

SIEVE_AVX2_INLINE void prefetch_step(const uint8_t* next, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
}

// 8 weight rows (w, w + stride, ..., w + 7 stride) at once, lane k = row k. Per block the rows'
// partial dots are reduced to one exact int32 each (as they are produced, to keep registers
// free), then one convert, one multiply and one FMA serve the 8 rows: per lane, the same chain
// as the GEMM's (acc = fma(float(I_b), d_w * d_x, acc), then the min term), i.e. the
// dot-product order of quant.h.
//
// Reading 8 rows side by side defeats the hardware prefetchers on a matrix streamed from DRAM
// (the decode case: 1.4-1.9x slower without help), so each block step also prefetches its share
// of a later group of rows (`next`, 8 * stride contiguous bytes; null for none).
template <GgmlType T>
SIEVE_AVX2 __m256 gemv_rows8(const uint8_t* w, size_t stride, const GemvAct& a, int64_t nb,
                             const uint8_t* next) {
  using B = typename Legacy<T>::B;
  constexpr size_t kStep = 8 * sizeof(B);  // bytes of the next group per block step
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    if (next) prefetch_step(next + i * kStep, kStep);
    const __m256i yv = simd::loadu(a.qs + 32 * i);
    __m256i off = _mm256_setzero_si256();
    if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q5_0) off = simd::loadu(a.off + 16 * i);
    const uint8_t* bp = w + i * sizeof(B);
    const __m256i t0 = simd::hsum2_i32(row_dot<T>(bp, yv, off), row_dot<T>(bp + stride, yv, off));
    const __m256i t1 =
        simd::hsum2_i32(row_dot<T>(bp + 2 * stride, yv, off), row_dot<T>(bp + 3 * stride, yv, off));
    const __m256i u0 = simd::hsum4_i32(t0, t1);
    const __m256i t2 =
        simd::hsum2_i32(row_dot<T>(bp + 4 * stride, yv, off), row_dot<T>(bp + 5 * stride, yv, off));
    const __m256i t3 =
        simd::hsum2_i32(row_dot<T>(bp + 6 * stride, yv, off), row_dot<T>(bp + 7 * stride, yv, off));
    const __m256i isum = simd::hsum8_i32(u0, simd::hsum4_i32(t2, t3));
    const __m256 scale =
        _mm256_mul_ps(gather_f16(bp + offsetof(B, d), stride), _mm256_broadcast_ss(a.d + i));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc);
    if constexpr (Legacy<T>::kMin) {
      acc = _mm256_fmadd_ps(gather_f16(bp + offsetof(B, m), stride), _mm256_broadcast_ss(a.s + i),
                            acc);
    }
  }
  return acc;
}

// K-quants, 8 rows at once against the Q8_K row: per super-block the exact I (and M) of each
// row, then acc = fma(float(I), d_w * d_x, acc) and acc = fma(-float(M), dmin_w * d_x, acc),
// as the GEMM's tile_k does per lane.
template <GgmlType T>
struct KQuant;
template <>
struct KQuant<GgmlType::Q4_K> {
  using B = BlockQ4_K;
};
template <>
struct KQuant<GgmlType::Q5_K> {
  using B = BlockQ5_K;
};
template <>
struct KQuant<GgmlType::Q6_K> {
  using B = BlockQ6_K;
};

template <GgmlType T>
SIEVE_AVX2_INLINE void k_row(const uint8_t* blk, const BlockQ8_K& y, __m256i* is, __m256i* im) {
  using B = typename KQuant<T>::B;
  if constexpr (T == GgmlType::Q6_K) {
    *is = kdot::q6k(*reinterpret_cast<const B*>(blk), y);
  } else {
    kdot::qk45<T == GgmlType::Q5_K>(*reinterpret_cast<const B*>(blk), y, is, im);
  }
}

// Rows k and k + 1: their isum and imin lanes, transposed and half summed (hsum2_i32).
template <GgmlType T>
SIEVE_AVX2_INLINE void k_pair(const uint8_t* blk, size_t stride, const BlockQ8_K& y, __m256i* ts,
                              __m256i* tm) {
  __m256i i0, i1, m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  k_row<T>(blk, y, &i0, &m0);
  k_row<T>(blk + stride, y, &i1, &m1);
  *ts = simd::hsum2_i32(i0, i1);
  if constexpr (T != GgmlType::Q6_K) *tm = simd::hsum2_i32(m0, m1);
}

template <GgmlType T>
SIEVE_AVX2 __m256 gemv_k_rows8(const uint8_t* w, size_t stride, const BlockQ8_K* y, int64_t nsb,
                               const uint8_t* next) {
  using B = typename KQuant<T>::B;
  constexpr bool kMin = T != GgmlType::Q6_K;
  constexpr size_t kStep = 8 * sizeof(B);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    if (next) prefetch_step(next + sb * kStep, kStep);
    const uint8_t* bp = w + sb * sizeof(B);
    __m256i ts[4], tm[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) k_pair<T>(bp + 2 * j * stride, stride, y[sb], &ts[j], &tm[j]);
    const __m256i isum =
        simd::hsum8_i32(simd::hsum4_i32(ts[0], ts[1]), simd::hsum4_i32(ts[2], ts[3]));
    const __m256 dx = _mm256_broadcast_ss(&y[sb].d);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                          _mm256_mul_ps(gather_f16(bp + offsetof(B, d), stride), dx), acc);
    if constexpr (kMin) {
      const __m256i imin =
          simd::hsum8_i32(simd::hsum4_i32(tm[0], tm[1]), simd::hsum4_i32(tm[2], tm[3]));
      acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin),
                             _mm256_mul_ps(gather_f16(bp + offsetof(B, dmin), stride), dx), acc);
    }
  }
  return acc;
}

constexpr bool is_k_type(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

// 8 rows of either kind; act: the prepared activation row.
template <GgmlType T>
SIEVE_AVX2_INLINE __m256 rows8(const uint8_t* w, size_t stride, const GemvAct& a,
                               const uint8_t* act, int64_t n, const uint8_t* next) {
  if constexpr (is_k_type(T)) {
    return gemv_k_rows8<T>(w, stride, reinterpret_cast<const BlockQ8_K*>(act), n / 256, next);
  } else {
    return gemv_rows8<T>(w, stride, a, n / 32, next);
  }
}

// Prefetch distance in 8-row groups (1 and 2 timed alike on Zen 3; tuning experiments only).
#ifndef SIEVE_GEMV_PF_GROUPS
#define SIEVE_GEMV_PF_GROUPS 1
#endif
constexpr int64_t kPrefetchGroups = SIEVE_GEMV_PF_GROUPS;

template <GgmlType T>
SIEVE_AVX2 void gemv_rows_t(const uint8_t* w, int64_t n, int64_t n_rows, int64_t r_begin,
                            int64_t r_end, const uint8_t* act, float* y) {
  const size_t wrow = static_cast<size_t>(row_bytes(T, n));
  GemvAct a{};
  if constexpr (!is_k_type(T)) a = carve(T, n, const_cast<uint8_t*>(act));
  alignas(32) float out[8];
  int64_t r = r_begin;
  for (; r + 8 <= r_end; r += 8) {
    const int64_t rn = r + 8 * kPrefetchGroups;
    const uint8_t* next = rn + 8 <= r_end ? w + rn * wrow : nullptr;
    _mm256_storeu_ps(y + r, rows8<T>(w + r * wrow, wrow, a, act, n, next));
  }
  if (r == r_end) return;
  // Tail of fewer than 8 rows: the 8 rows ending at r_end (re-reading rows before r_begin is
  // harmless; lanes are independent, so a row's value does not depend on its lane), or, for a
  // matrix of fewer than 8 rows, a zero-padded copy.
  if (n_rows >= 8) {
    const int64_t r0 = std::max<int64_t>(0, r_end - 8);
    _mm256_store_ps(out, rows8<T>(w + r0 * wrow, wrow, a, act, n, nullptr));
    for (; r < r_end; ++r) y[r] = out[r - r0];
  } else {
    std::vector<uint8_t> pad(8 * wrow, 0);
    std::memcpy(pad.data(), w, n_rows * wrow);
    _mm256_store_ps(out, rows8<T>(pad.data(), wrow, a, act, n, nullptr));
    for (; r < r_end; ++r) y[r] = out[r];
  }
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

void gemv_rows_avx2(GgmlType t, const uint8_t* w, int64_t n, int64_t n_rows, int64_t r_begin,
                    int64_t r_end, const uint8_t* act, float* y, const QuantKernels& k) {
#if SIEVE_HAVE_AVX2_BUILD
  switch (t) {
    case GgmlType::Q4_0:
      return gemv_rows_t<GgmlType::Q4_0>(w, n, n_rows, r_begin, r_end, act, y);
    case GgmlType::Q4_1:
      return gemv_rows_t<GgmlType::Q4_1>(w, n, n_rows, r_begin, r_end, act, y);
    case GgmlType::Q5_0:
      return gemv_rows_t<GgmlType::Q5_0>(w, n, n_rows, r_begin, r_end, act, y);
    case GgmlType::Q5_1:
      return gemv_rows_t<GgmlType::Q5_1>(w, n, n_rows, r_begin, r_end, act, y);
    case GgmlType::Q8_0:
      return gemv_rows_t<GgmlType::Q8_0>(w, n, n_rows, r_begin, r_end, act, y);
    case GgmlType::Q4_K:
      return gemv_rows_t<GgmlType::Q4_K>(w, n, n_rows, r_begin, r_end, act, y);
    case GgmlType::Q5_K:
      return gemv_rows_t<GgmlType::Q5_K>(w, n, n_rows, r_begin, r_end, act, y);
    case GgmlType::Q6_K:
      return gemv_rows_t<GgmlType::Q6_K>(w, n, n_rows, r_begin, r_end, act, y);
    default:
      break;
  }
#endif
  // Other types (none today): vec_dot, which follows the same order.
  const size_t wrow = static_cast<size_t>(row_bytes(t, n));
  for (int64_t r = r_begin; r < r_end; ++r) y[r] = k.vec_dot(w + r * wrow, act, n);
}

}  // namespace sieve::cpu

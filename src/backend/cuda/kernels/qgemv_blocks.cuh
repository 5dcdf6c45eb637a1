// Block formats of the quantized GEMV (kernels/qgemv.cuh): per GGUF type, how one thread
// loads a chunk of 32 weights, turns it into int8x4 words and takes dp4a products with the int8
// activations (x8). Layouts: docs/shared reference §2, backend/cpu/quant_blocks.h.
//
// Alignment: Q4_K/Q5_K blocks (144/176 B) sit on 16 bytes and stream with 16-byte loads. The
// others (18, 20, 22, 24, 34, 210 B) sit on 2, 4 or 8 bytes: a thread loads the 16-byte aligned
// window around its bytes (2 or 3 vector loads, coalesced across the warp) and picks the bytes
// out with selects and funnel shifts (window / extract). A window may reach past W's last
// byte, but never past the 16-byte aligned chunk that holds it.
#pragma once

#include <cuda_fp16.h>
#include <vector_types.h>

#include <cstdint>
#include <cstring>

// Device code under nvcc; plain inline functions in a host build, where the test that emulates
// the chunk routines on the CPU (tests/qgemv_blocks_test.cpp) defines __ldg, __dp4a and
// __funnelshift_r first.
#if defined(__CUDACC__)
#define SIEVE_QG_FN __device__ __forceinline__
#else
#define SIEVE_QG_FN inline
#endif

namespace sieve::cuda::qgemv {

enum class qtype : int { q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k };

// ---- loads
SIEVE_QG_FN uint4 ld_w128(const uint8_t* p) {
  uint4 v;
#if defined(__CUDA_ARCH__)
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
#else
  std::memcpy(&v, p, sizeof v);
#endif
  return v;
}
// The N 16-byte aligned chunks from p & ~15 as words; chunk i > 0 only when bytes [p, p + n)
// reach it. Returns p's offset in the window. L1-allocating: neighbouring threads share chunks.
template <int N>
SIEVE_QG_FN uint32_t window(const uint8_t* p, int n, uint32_t (&w)[4 * N]) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto* q = reinterpret_cast<const uint4*>(a & ~uintptr_t{15});
  const auto o = static_cast<uint32_t>(a & 15);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (i == 0 || o + static_cast<uint32_t>(n) > 16u * i) v = __ldg(q + i);
    w[4 * i] = v.x;
    w[4 * i + 1] = v.y;
    w[4 * i + 2] = v.z;
    w[4 * i + 3] = v.w;
  }
  return o;
}
// K little-endian words at byte offset o (even, < 16) of a window; bytes past it read as 0.
template <int NW, int K>
SIEVE_QG_FN void extract(const uint32_t (&w)[NW], uint32_t o, uint32_t (&out)[K]) {
  const bool by8 = (o & 8) != 0, by4 = (o & 4) != 0;
  const uint32_t sh = (o & 3) * 8;
  uint32_t v[NW + 1];
#pragma unroll
  for (int j = 0; j < NW; ++j) v[j] = by8 ? (j + 2 < NW ? w[j + 2] : 0u) : w[j];
  v[NW] = 0u;
#pragma unroll
  for (int j = 0; j < NW; ++j) v[j] = by4 ? v[j + 1] : v[j];
#pragma unroll
  for (int i = 0; i < K; ++i) out[i] = __funnelshift_r(v[i], i + 1 <= NW ? v[i + 1] : 0u, sh);
}
// Bytes 2..2+4K of words f: the quants behind a 2-byte scale.
template <int K, int NF>
SIEVE_QG_FN void skip16(const uint32_t (&f)[NF], uint32_t (&out)[K]) {
#pragma unroll
  for (int i = 0; i < K; ++i) out[i] = __funnelshift_r(f[i], f[i + 1], 16);
}
// Nibbles / 5-bit / 6-bit quants q (unsigned bytes) minus 8 / 16 / 32 as signed bytes:
// (q + 0x80 - off) ^ 0x80 per byte, no carries between bytes.
template <int Off>
SIEVE_QG_FN uint32_t signed_q(uint32_t q) {
  return (q + 0x01010101u * (0x80u - Off)) ^ 0x80808080u;
}
SIEVE_QG_FN float half_lo(uint32_t v) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(v & 0xffffu)));
}
SIEVE_QG_FN float half_hi(uint32_t v) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(v >> 16)));
}
SIEVE_QG_FN int dp4a(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}
// 4 bits of t -> bit 0 of each byte (bit k of t -> byte k; no carries: bit i lands at i + 7j).
SIEVE_QG_FN uint32_t spread4(uint32_t t) {
  return (t * 0x00204081u) & 0x01010101u;
}

// 16 x8 quants (16-byte aligned).
SIEVE_QG_FN uint4 ld_x128(const int8_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
SIEVE_QG_FN int dot16(const uint32_t* w, uint4 x, int c) {
  c = dp4a(w[0], x.x, c);
  c = dp4a(w[1], x.y, c);
  c = dp4a(w[2], x.z, c);
  return dp4a(w[3], x.w, c);
}

// 6-bit scale and min of sub-block j of a Q4_K/Q5_K block; s0..s2 = scales[0..11] as words.
SIEVE_QG_FN void scale_min_k4(int j, uint32_t s0, uint32_t s1, uint32_t s2, int& sc, int& m) {
  const int sh = 8 * (j & 3);
  const uint32_t a = s0 >> sh, b = s1 >> sh, c = s2 >> sh;
  if (j < 4) {
    sc = static_cast<int>(a & 63);
    m = static_cast<int>(b & 63);
  } else {
    sc = static_cast<int>((c & 0xF) | (((a >> 6) & 3) << 4));
    m = static_cast<int>(((c >> 4) & 0xF) | (((b >> 6) & 3) << 4));
  }
}

// ---- per-type chunk routines: acc[r][t] += dequant(W row r, chunk) . x8(token t, chunk).
// wb[r]: the block of row r holding the chunk; sub: chunk within the block; xq/xs: token 0's
// quants at the block's first element and its first (d, sum); ldq/lds: token strides.
template <qtype Q>
struct traits;

// Legacy 32-blocks: one chunk per block. Weight quants in w[0..7] as signed bytes (offsets
// of Q4_0 / Q5_0 taken off) with elements 4i..4i+3 in word i (low nibbles -> elements 0..15,
// high -> 16..31, as the x8 bytes lie). x = d * q (+ m for Q4_1 / Q5_1: m * sum of x8).
template <qtype Q>
struct legacy {
  static constexpr int block_elems = 32, chunks = 1;
  template <int R, int NT>
  static SIEVE_QG_FN void chunk(const uint8_t* const (&wb)[R], int /*sub*/, const int8_t* xq,
                                int64_t ldq, const float2* xs, int64_t lds, float (&acc)[R][NT]) {
    uint32_t w[R][8];
    float d[R], m[R];
#pragma unroll
    for (int r = 0; r < R; ++r) traits<Q>::load(wb[r], w[r], d[r], m[r]);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint4 xa = ld_x128(xq + t * ldq), xb = ld_x128(xq + t * ldq + 16);
      const float2 s = __ldg(xs + t * lds);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = dot16(w[r] + 4, xb, dot16(w[r], xa, 0));
        acc[r][t] = fmaf(s.x, fmaf(d[r], static_cast<float>(i), m[r] * s.y), acc[r][t]);
      }
    }
  }
};

// low / high nibbles of 4 words into w[0..3] / w[4..7]
SIEVE_QG_FN void nibbles(const uint32_t (&q)[4], uint32_t (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = q[i] & 0x0F0F0F0Fu;
    w[i + 4] = (q[i] >> 4) & 0x0F0F0F0Fu;
  }
}
// 5th bits: element j of the block takes bit j of qh (j = 4i + byte, +16 for w[4..7])
SIEVE_QG_FN void fifth_bits(uint32_t qh, uint32_t (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] |= spread4((qh >> (4 * i)) & 0xF) << 4;
    w[i + 4] |= spread4((qh >> (16 + 4 * i)) & 0xF) << 4;
  }
}

template <>
struct traits<qtype::q4_0> : legacy<qtype::q4_0> {
  static constexpr int block_bytes = 18;
  static SIEVE_QG_FN void load(const uint8_t* b, uint32_t (&w)[8], float& d, float& m) {
    uint32_t win[8], f[5], q[4];
    extract(win, window<2>(b, block_bytes, win), f);
    skip16(f, q);
    nibbles(q, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = signed_q<8>(w[i]);
    d = half_lo(f[0]);
    m = 0.f;
  }
};
template <>
struct traits<qtype::q4_1> : legacy<qtype::q4_1> {
  static constexpr int block_bytes = 20;
  static SIEVE_QG_FN void load(const uint8_t* b, uint32_t (&w)[8], float& d, float& m) {
    uint32_t win[8], f[5];
    extract(win, window<2>(b, block_bytes, win), f);
    const uint32_t q[4] = {f[1], f[2], f[3], f[4]};
    nibbles(q, w);
    d = half_lo(f[0]);
    m = half_hi(f[0]);
  }
};
template <>
struct traits<qtype::q5_0> : legacy<qtype::q5_0> {
  static constexpr int block_bytes = 22;
  static SIEVE_QG_FN void load(const uint8_t* b, uint32_t (&w)[8], float& d, float& m) {
    uint32_t win[12], f[6];
    extract(win, window<3>(b, block_bytes, win), f);
    const uint32_t q[4] = {__funnelshift_r(f[1], f[2], 16), __funnelshift_r(f[2], f[3], 16),
                           __funnelshift_r(f[3], f[4], 16), __funnelshift_r(f[4], f[5], 16)};
    nibbles(q, w);
    fifth_bits(__funnelshift_r(f[0], f[1], 16), w);
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = signed_q<16>(w[i]);
    d = half_lo(f[0]);
    m = 0.f;
  }
};
template <>
struct traits<qtype::q5_1> : legacy<qtype::q5_1> {
  static constexpr int block_bytes = 24;
  static SIEVE_QG_FN void load(const uint8_t* b, uint32_t (&w)[8], float& d, float& m) {
    uint32_t win[8], f[6];
    extract(win, window<2>(b, block_bytes, win), f);
    const uint32_t q[4] = {f[2], f[3], f[4], f[5]};
    nibbles(q, w);
    fifth_bits(f[1], w);
    d = half_lo(f[0]);
    m = half_hi(f[0]);
  }
};
template <>
struct traits<qtype::q8_0> : legacy<qtype::q8_0> {
  static constexpr int block_bytes = 34;
  static SIEVE_QG_FN void load(const uint8_t* b, uint32_t (&w)[8], float& d, float& m) {
    uint32_t win[12], f[9];
    extract(win, window<3>(b, block_bytes, win), f);
    skip16(f, w);
    d = half_lo(f[0]);
    m = 0.f;
  }
};

// Q4_K / Q5_K: chunk sub = 2c + h covers qs[32c + 16h, +16): low nibbles are elements
// 64c + 16h + (0..15) of sub-block 2c, high nibbles the same 16 of sub-block 2c + 1. The
// thread with h = 0 adds both sub-blocks' min terms (dmin * m * sum of the 32 x8 quants).
template <qtype Q>
struct kquant45 {
  static constexpr int block_elems = 256, chunks = 8;
  static constexpr bool five = Q == qtype::q5_k;
  static constexpr int block_bytes = five ? 176 : 144;
  template <int R, int NT>
  static SIEVE_QG_FN void chunk(const uint8_t* const (&wb)[R], int sub, const int8_t* xq,
                                int64_t ldq, const float2* xs, int64_t lds, float (&acc)[R][NT]) {
    const int c = sub >> 1, h = sub & 1;
    uint32_t lo[R][4], hi[R][4];
    float d0[R], d1[R], m0[R], m1[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 hd = ld_w128(wb[r]);
      const uint4 q = ld_w128(wb[r] + (five ? 48 : 16) + 32 * c + 16 * h);
      const uint32_t qv[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lo[r][i] = qv[i] & 0x0F0F0F0Fu;
        hi[r][i] = (qv[i] >> 4) & 0x0F0F0F0Fu;
      }
      if constexpr (five) {
        const uint4 qh = ld_w128(wb[r] + 16 + 16 * h);
        const uint32_t hv[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          lo[r][i] |= ((hv[i] >> (2 * c)) & 0x01010101u) << 4;
          hi[r][i] |= ((hv[i] >> (2 * c + 1)) & 0x01010101u) << 4;
        }
      }
      int sc0, mn0, sc1, mn1;
      scale_min_k4(2 * c, hd.y, hd.z, hd.w, sc0, mn0);
      scale_min_k4(2 * c + 1, hd.y, hd.z, hd.w, sc1, mn1);
      const float d = half_lo(hd.x), dmin = h == 0 ? half_hi(hd.x) : 0.f;
      d0[r] = d * static_cast<float>(sc0);
      d1[r] = d * static_cast<float>(sc1);
      m0[r] = dmin * static_cast<float>(mn0);
      m1[r] = dmin * static_cast<float>(mn1);
    }
    const int e = 64 * c + 16 * h;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint4 xa = ld_x128(xq + t * ldq + e), xb = ld_x128(xq + t * ldq + e + 32);
      const float2 s0 = __ldg(xs + t * lds + 2 * c), s1 = __ldg(xs + t * lds + 2 * c + 1);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float f0 = fmaf(d0[r], static_cast<float>(dot16(lo[r], xa, 0)), -m0[r] * s0.y);
        const float f1 = fmaf(d1[r], static_cast<float>(dot16(hi[r], xb, 0)), -m1[r] * s1.y);
        acc[r][t] += fmaf(s0.x, f0, s1.x * f1);
      }
    }
  }
};
template <>
struct traits<qtype::q4_k> : kquant45<qtype::q4_k> {};
template <>
struct traits<qtype::q5_k> : kquant45<qtype::q5_k> {};

// Q6_K: in half h (128 elements), ql[64h + j] holds element j (low nibble) and j + 64 (high);
// qh[32h + l] holds 2 bits each of elements l, l + 32, l + 64, l + 96; scale sc[8h + e / 16];
// x = d * sc * (q - 32). Chunk sub = 4h + k covers ql[64h + 16k, +16): elements 16k + (0..15)
// (low) and 64 + 16k + (0..15) (high), their bits in qh[32h + 16 (k & 1), +16) at bit
// 2 (k >> 1) (low) and 4 + 2 (k >> 1) (high). Blocks are 210 bytes: windows.
template <>
struct traits<qtype::q6_k> {
  static constexpr int block_elems = 256, chunks = 8, block_bytes = 210;
  template <int R, int NT>
  static SIEVE_QG_FN void chunk(const uint8_t* const (&wb)[R], int sub, const int8_t* xq,
                                int64_t ldq, const float2* xs, int64_t lds, float (&acc)[R][NT]) {
    const int h = sub >> 2, k = sub & 3, sl = 2 * (k >> 1);
    uint32_t lo[R][4], hi[R][4];
    float dlo[R], dhi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t win[8], ql[4], qh[4];
      extract(win, window<2>(wb[r] + 64 * h + 16 * k, 16, win), ql);
      extract(win, window<2>(wb[r] + 128 + 32 * h + 16 * (k & 1), 16, win), qh);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // the two qh bits go to bits 4-5 of each byte: from bits sl, sl+1 (low elements) by a
        // left shift of 4 - sl, from bits sl+4, sl+5 (high) by a right shift of sl
        lo[r][i] = signed_q<32>((ql[i] & 0x0F0F0F0Fu) | ((qh[i] << (4 - sl)) & 0x30303030u));
        hi[r][i] = signed_q<32>(((ql[i] >> 4) & 0x0F0F0F0Fu) | ((qh[i] >> sl) & 0x30303030u));
      }
      const auto* sc = reinterpret_cast<const int8_t*>(wb[r] + 192 + 8 * h + k);
      const float d = __half2float(
          __ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(wb[r] + 208))));
      dlo[r] = d * static_cast<float>(__ldg(sc));
      dhi[r] = d * static_cast<float>(__ldg(sc + 4));
    }
    const int e = 128 * h + 16 * k;
    const int jb = 4 * h + (k >> 1);  // x8 block of the low elements; high: jb + 2
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint4 xa = ld_x128(xq + t * ldq + e), xb = ld_x128(xq + t * ldq + e + 64);
      const float da = __ldg(xs + t * lds + jb).x, db = __ldg(xs + t * lds + jb + 2).x;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float fa = dlo[r] * static_cast<float>(dot16(lo[r], xa, 0));
        const float fb = dhi[r] * static_cast<float>(dot16(hi[r], xb, 0));
        acc[r][t] = fmaf(da, fa, fmaf(db, fb, acc[r][t]));
      }
    }
  }
};

}  // namespace sieve::cuda::qgemv

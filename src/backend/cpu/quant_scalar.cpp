// Scalar reference kernels: dequantization exactly per the shared reference §2, activation
// quantization exactly as ggml's x86 build does it, and integer dot products per block
// combined in the dot-product order of quant.h. The AVX2 kernels (and every matmul path)
// reproduce all three bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "core/assert.h"
#include "core/fp16.h"

namespace sieve::cpu {
namespace {

using namespace qblock;

inline float h2f(uint16_t h) {
  return fp16_to_f32(h);
}

// One rounding (std::fma is exact-then-round whether or not the CPU has FMA).
inline float fmaf1(float a, float b, float c) {
  return std::fma(a, b, c);
}

// The float dot-product order of quant.h: 8 lane chains, the AVX2 hsum tree, an fma tail.
template <class Load>
float float_dot(int64_t n, Load ld) {
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    for (int l = 0; l < 8; ++l) {
      const auto [w, x] = ld(c + l);
      a[l] = fmaf1(w, x, a[l]);
    }
  }
  float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (; c < n; ++c) {
    const auto [w, x] = ld(c);
    s = fmaf1(w, x, s);
  }
  return s;
}

// ---------------------------------------------------------------- dequantization

void dq_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dq_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
}
void dq_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}

void dq_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      dst[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dq_q4_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    const float m = h2f(b[i].m);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(b[i].qs[j] & 0xF) * d + m;
      dst[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void dq_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      dst[j] = static_cast<float>(lo - 16) * d;
      dst[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dq_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    const float m = h2f(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      dst[j] = static_cast<float>(lo) * d + m;
      dst[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void dq_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// Q4_K/Q5_K: x = (d*sc)*q - (dmin*m), the two products rounded separately as ggml does.
void dq_q4_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(b[i].d);
    const float dmin = h2f(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, m0, sc1, m1;
      scale_min_k4(2 * c, b[i].scales, &sc0, &m0);
      scale_min_k4(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      const uint8_t* q = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        *dst++ = d0 * static_cast<float>(q[l] & 0xF) - mm0;
      }
      for (int l = 0; l < 32; ++l) {
        *dst++ = d1 * static_cast<float>(q[l] >> 4) - mm1;
      }
    }
  }
}

void dq_q5_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(b[i].d);
    const float dmin = h2f(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, m0, sc1, m1;
      scale_min_k4(2 * c, b[i].scales, &sc0, &m0);
      scale_min_k4(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
      const uint8_t* q = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 0xF) + (((b[i].qh[l] >> (2 * c)) & 1) << 4);
        *dst++ = d0 * static_cast<float>(v) - mm0;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) + (((b[i].qh[l] >> (2 * c + 1)) & 1) << 4);
        *dst++ = d1 * static_cast<float>(v) - mm1;
      }
    }
  }
}

// Q6_K: x = (d*sc)*(q-32), scale index = element / 16.
void dq_q6_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      float* y = dst + 256 * i + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = (d * sc[l / 16]) * static_cast<float>(q0);
        y[l + 32] = (d * sc[2 + l / 16]) * static_cast<float>(q1);
        y[l + 64] = (d * sc[4 + l / 16]) * static_cast<float>(q2);
        y[l + 96] = (d * sc[6 + l / 16]) * static_cast<float>(q3);
      }
    }
  }
}

// ---------------------------------------------------------------- activation quantization

void qa_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}
void qa_f16(const float* x, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(x[i]);
}
void qa_bf16(const float* x, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(x[i]);
}

// ggml's x86 quantize_row_q8_0/q8_1: id = 127/amax (not 1/d) and round half to even; the
// scalar reference follows the SIMD formula so both paths give identical bytes.
template <bool kWithSum>
void qa_q8_legacy(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int8_t* qs;
    int sum = 0;
    if constexpr (kWithSum) {
      auto* b = static_cast<BlockQ8_1*>(dst) + i;
      b->d = f32_to_fp16(d);
      qs = b->qs;
    } else {
      auto* b = static_cast<BlockQ8_0*>(dst) + i;
      b->d = f32_to_fp16(d);
      qs = b->qs;
    }
    for (int j = 0; j < kQK; ++j) {
      const int q = static_cast<int>(std::nearbyint(x[j] * id));
      qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    if constexpr (kWithSum)
      static_cast<BlockQ8_1*>(dst)[i].s = f32_to_fp16(d * static_cast<float>(sum));
  }
}

// ggml's quantize_row_q8_K_ref: the scale comes from the signed value of largest magnitude,
// d stays f32, q clamped at 127 only. bsums are zeroed for an all-zero block (ggml leaves them).
void qa_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      const int v = static_cast<int>(std::nearbyint(iscale * x[j]));
      y[i].qs[j] = static_cast<int8_t>(std::min(127, v));
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

// ---------------------------------------------------------------- dot products

float vd_f32(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(x);
  return float_dot(n, [&](int64_t i) { return std::pair<float, float>(a[i], b[i]); });
}
float vd_f16(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const uint16_t*>(x);
  return float_dot(
      n, [&](int64_t i) { return std::pair<float, float>(fp16_to_f32(a[i]), fp16_to_f32(b[i])); });
}
float vd_bf16(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const uint16_t*>(x);
  return float_dot(
      n, [&](int64_t i) { return std::pair<float, float>(bf16_to_f32(a[i]), bf16_to_f32(b[i])); });
}

float vd_q4_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ4_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
      s += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
    }
    sum = fmaf1(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), sum);
  }
  return sum;
}

float vd_q4_1(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ4_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += (a[i].qs[j] & 0xF) * b[i].qs[j];
      s += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
    }
    sum = fmaf1(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), sum);
    sum = fmaf1(h2f(a[i].m), h2f(b[i].s), sum);
  }
  return sum;
}

float vd_q5_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ5_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(a[i].qh);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = ((a[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
      const int hi = ((a[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
      s += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
    }
    sum = fmaf1(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), sum);
  }
  return sum;
}

float vd_q5_1(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ5_1*>(w);
  const auto* b = static_cast<const BlockQ8_1*>(x);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(a[i].qh);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (a[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (a[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      s += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
    }
    sum = fmaf1(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), sum);
    sum = fmaf1(h2f(a[i].m), h2f(b[i].s), sum);
  }
  return sum;
}

float vd_q8_0(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ8_0*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += a[i].qs[j] * b[i].qs[j];
    sum = fmaf1(static_cast<float>(s), h2f(a[i].d) * h2f(b[i].d), sum);
  }
  return sum;
}

// Q4_K/Q5_K: per super-block, d_x*d*sum_j(sc_j*dot_j) - d_x*dmin*sum_j(m_j*bsum32_j).
template <bool kQ5>
float vd_qk45(const void* w, const void* x, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0;
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
    int isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      scale_min_k4(j, scales, &sc, &m);
      const int c = j / 2;
      const int shift = (j & 1) * 4;
      int dot = 0;
      for (int l = 0; l < 32; ++l) {
        int q = (qs[32 * c + l] >> shift) & 0xF;
        if constexpr (kQ5) q |= ((qh[l] >> j) & 1) << 4;
        dot += q * b[i].qs[32 * j + l];
      }
      isum += sc * dot;
      imin += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
    sum = fmaf1(static_cast<float>(isum), d * b[i].d, sum);
    sum = fmaf1(-static_cast<float>(imin), dmin * b[i].d, sum);
  }
  return sum;
}

float vd_q6_k(const void* w, const void* x, int64_t n) {
  const auto* a = static_cast<const BlockQ6_K*>(w);
  const auto* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t q[256];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = a[i].ql + 64 * h;
      const uint8_t* qh = a[i].qh + 32 * h;
      int8_t* y = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        y[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        y[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        y[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        y[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[16 * j + l] * b[i].qs[16 * j + l];
      isum += a[i].scales[j] * dot;
    }
    sum = fmaf1(static_cast<float>(isum), h2f(a[i].d) * b[i].d, sum);
  }
  return sum;
}

}  // namespace

bool is_supported_weight_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

int64_t block_elems(GgmlType t) {
  const TypeInfo* ti = type_info(t);
  SIEVE_ASSERT(ti != nullptr);
  return ti->block_size;
}

QuantKernels quant_kernels_scalar(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return {dq_f32, qa_f32, vd_f32};
    case GgmlType::F16:
      return {dq_f16, qa_f16, vd_f16};
    case GgmlType::BF16:
      return {dq_bf16, qa_bf16, vd_bf16};
    case GgmlType::Q4_0:
      return {dq_q4_0, qa_q8_legacy<false>, vd_q4_0};
    case GgmlType::Q4_1:
      return {dq_q4_1, qa_q8_legacy<true>, vd_q4_1};
    case GgmlType::Q5_0:
      return {dq_q5_0, qa_q8_legacy<false>, vd_q5_0};
    case GgmlType::Q5_1:
      return {dq_q5_1, qa_q8_legacy<true>, vd_q5_1};
    case GgmlType::Q8_0:
      return {dq_q8_0, qa_q8_legacy<false>, vd_q8_0};
    case GgmlType::Q4_K:
      return {dq_q4_k, qa_q8_k, vd_qk45<false>};
    case GgmlType::Q5_K:
      return {dq_q5_k, qa_q8_k, vd_qk45<true>};
    case GgmlType::Q6_K:
      return {dq_q6_k, qa_q8_k, vd_q6_k};
    default:
      break;
  }
  SIEVE_ASSERT(false && "unsupported weight type");
  return {};
}

}  // namespace sieve::cpu

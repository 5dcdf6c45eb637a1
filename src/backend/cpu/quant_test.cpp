// Quant kernels: scalar reference against the formulas, AVX2 against the scalar reference
// (bit-exact dequantization, activation bytes and dot products), and both against a
// double-precision dot on unquantized activations within the quantization bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_test_util.h"
#include "core/fp16.h"

namespace sieve {
namespace {

using namespace qblock;
using cpu::QuantKernels;
using namespace testutil;

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                                 GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

std::string type_label(const testing::TestParamInfo<GgmlType>& p) {
  return std::string(type_name(p.param));
}

int64_t test_len(GgmlType t) {
  return type_info(t)->block_size == 256 ? 256 * 7 : 32 * 19;
}

class QuantTypeTest : public testing::TestWithParam<GgmlType> {};

TEST(QuantScale, ScaleMinK4WorkedExample) {
  const uint8_t scales[12] = {0xC5, 0x41, 0x3F, 0x80, 0x07, 0xFF,
                              0x20, 0x40, 0x9A, 0x12, 0xF0, 0x0F};
  const int want[8][2] = {{5, 7}, {1, 63}, {63, 32}, {0, 0}, {58, 9}, {18, 49}, {0, 15}, {47, 16}};
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales, &sc, &m);
    EXPECT_EQ(sc, want[j][0]) << j;
    EXPECT_EQ(m, want[j][1]) << j;
  }
}

// Hand-built blocks checked against the formulas written out independently here.
TEST(QuantScalar, LegacyNibbleOrderAndOffsets) {
  BlockQ4_0 q4{};
  q4.d = f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) q4.qs[j] = static_cast<uint8_t>((j & 0xF) | ((15 - j) << 4));
  float y[32];
  dequantize_row_ref(GgmlType::Q4_0, &q4, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);  // high nibble = element j+16
  }
  BlockQ5_1 q5{};
  q5.d = f32_to_fp16(2.0f);
  q5.m = f32_to_fp16(-1.0f);
  const uint32_t qh = 0x80000001u;  // element 0 and element 31 get bit 4
  std::memcpy(q5.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) q5.qs[j] = 0x33;
  dequantize_row_ref(GgmlType::Q5_1, &q5, y, 32);
  EXPECT_EQ(y[0], 19 * 2.0f - 1.0f);
  EXPECT_EQ(y[1], 3 * 2.0f - 1.0f);
  EXPECT_EQ(y[31], 19 * 2.0f - 1.0f);
  EXPECT_EQ(y[30], 3 * 2.0f - 1.0f);
}

TEST(QuantScalar, Q6KLayout) {
  BlockQ6_K b{};
  b.d = f32_to_fp16(0.25f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j - 8);
  std::mt19937 rng(7);
  for (auto& v : b.ql) v = static_cast<uint8_t>(rng());
  for (auto& v : b.qh) v = static_cast<uint8_t>(rng());
  float y[256];
  dequantize_row_ref(GgmlType::Q6_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    // Independent formulation: element e = 128h + 32r + l; ql byte (l + 32*(r&1)) of half h,
    // nibble r>>1; qh byte l of half h, bits 2r..2r+1.
    const int h = e / 128, r = (e % 128) / 32, l = e % 32;
    const int lo = (b.ql[64 * h + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 0xF;
    const int hi = (b.qh[32 * h + l] >> (2 * r)) & 3;
    const float want =
        (0.25f * static_cast<float>(e / 16 - 8)) * static_cast<float>((lo | (hi << 4)) - 32);
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantScalar, Q4KLayout) {
  BlockQ4_K b{};
  b.d = f32_to_fp16(0.5f);
  b.dmin = f32_to_fp16(0.125f);
  const uint8_t scales[12] = {0xC5, 0x41, 0x3F, 0x80, 0x07, 0xFF,
                              0x20, 0x40, 0x9A, 0x12, 0xF0, 0x0F};
  std::memcpy(b.scales, scales, 12);
  std::mt19937 rng(3);
  for (auto& v : b.qs) v = static_cast<uint8_t>(rng());
  float y[256];
  dequantize_row_ref(GgmlType::Q4_K, &b, y, 256);
  const int sc[8] = {5, 1, 63, 0, 58, 18, 0, 47}, mn[8] = {7, 63, 32, 0, 9, 49, 15, 16};
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, c = e / 64, l = e % 32;
    const int q = (b.qs[32 * c + l] >> (4 * (j & 1))) & 0xF;
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(sc[j]) * static_cast<float>(q) -
                        0.125f * static_cast<float>(mn[j]))
        << e;
  }
}

TEST_P(QuantTypeTest, Avx2DequantizeEqualsReference) {
  if (!cpu::has_avx2_kernels()) GTEST_SKIP() << "no AVX2";
  const GgmlType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) * 101 + 5);
  for (int64_t n : {test_len(t), type_info(t)->block_size == 256 ? int64_t{256} : int64_t{32},
                    type_info(t)->block_size == 1 ? int64_t{37} : test_len(t) * 2}) {
    const auto w = random_weights(t, n, rng);
    std::vector<float> a(n), b(n);
    cpu::quant_kernels_scalar(t).dequantize(w.data(), a.data(), n);
    cpu::quant_kernels_avx2(t).dequantize(w.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i]))
          << type_name(t) << " n=" << n << " i=" << i << " " << a[i] << " vs " << b[i];
    }
  }
}

TEST_P(QuantTypeTest, Avx2QuantizeActivationsEqualsReference) {
  if (!cpu::has_avx2_kernels()) GTEST_SKIP() << "no AVX2";
  const GgmlType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) * 7 + 1);
  const int64_t n = type_info(vec_dot_type(t))->block_size == 256 ? 256 * 5 : 32 * 23;
  auto x = random_activations(n, rng, true);
  x[3] = 0.5f;  // values that land on .5 after scaling exercise the tie rule
  const size_t bytes = activation_row_bytes(t, n);
  std::vector<uint8_t> a(bytes, 0xAA), b(bytes, 0x55);
  cpu::quant_kernels_scalar(t).quantize(x.data(), a.data(), n);
  cpu::quant_kernels_avx2(t).quantize(x.data(), b.data(), n);
  for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(a[i], b[i]) << type_name(t) << " byte " << i;
}

// Activation values as the dot product sees them (for the error bound).
std::vector<double> dequantized_activations(GgmlType w, const void* xq, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  switch (vec_dot_type(w)) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<const float*>(xq)[i];
      break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(static_cast<const uint16_t*>(xq)[i]);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(static_cast<const uint16_t*>(xq)[i]);
      break;
    case GgmlType::Q8_0:
      for (int64_t i = 0; i < n; ++i) {
        const auto& b = static_cast<const BlockQ8_0*>(xq)[i / 32];
        out[i] = static_cast<double>(fp16_to_f32(b.d)) * b.qs[i % 32];
      }
      break;
    case GgmlType::Q8_1:
      for (int64_t i = 0; i < n; ++i) {
        const auto& b = static_cast<const BlockQ8_1*>(xq)[i / 32];
        out[i] = static_cast<double>(fp16_to_f32(b.d)) * b.qs[i % 32];
      }
      break;
    case GgmlType::Q8_K:
      for (int64_t i = 0; i < n; ++i) {
        const auto& b = static_cast<const BlockQ8_K*>(xq)[i / 256];
        out[i] = static_cast<double>(b.d) * b.qs[i % 256];
      }
      break;
    default:
      break;
  }
  return out;
}

// Q4_1/Q5_1 use s = fp16(d*sum q) for the min term instead of sum(d16*q): its rounding error.
double min_term_rounding(GgmlType t, const void* w, const void* xq, int64_t n) {
  if (vec_dot_type(t) != GgmlType::Q8_1) return 0;
  double e = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    const auto& xb = static_cast<const BlockQ8_1*>(xq)[i];
    const uint16_t m = t == GgmlType::Q4_1 ? static_cast<const BlockQ4_1*>(w)[i].m
                                           : static_cast<const BlockQ5_1*>(w)[i].m;
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += xb.qs[j];
    e += std::fabs(static_cast<double>(fp16_to_f32(m))) *
         std::fabs(static_cast<double>(fp16_to_f32(xb.s)) -
                   static_cast<double>(fp16_to_f32(xb.d)) * sum);
  }
  return e;
}

TEST_P(QuantTypeTest, VecDotMatchesDoubleReference) {
  const GgmlType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) * 13 + 2);
  for (int rep = 0; rep < 20; ++rep) {
    const int64_t n = type_info(t)->block_size == 1 ? 32 * (1 + rep) + rep : test_len(t);
    const auto w = random_weights(t, n, rng);
    const auto x = random_activations(n, rng, rep % 3 == 0);
    std::vector<float> wf(n);
    dequantize_row_ref(t, w.data(), wf.data(), n);
    std::vector<uint8_t> xq(activation_row_bytes(t, n));
    cpu::quant_kernels_scalar(t).quantize(x.data(), xq.data(), n);
    const auto xd = dequantized_activations(t, xq.data(), n);

    // On the quantized activations the kernels are exact integer sums times float scales:
    // allow float rounding only (relative to the magnitude of the terms).
    double exact_q = 0, mag_q = 0, quant_err = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact_q += static_cast<double>(wf[i]) * xd[i];
      mag_q += std::fabs(static_cast<double>(wf[i]) * xd[i]);
      quant_err += std::fabs(static_cast<double>(wf[i])) * std::fabs(x[i] - xd[i]);
      mag += std::fabs(static_cast<double>(wf[i]) * x[i]);
    }
    const double s_err = min_term_rounding(t, w.data(), xq.data(), n);
    // Float rounding: the kernels round d_w*d_x, each block product and the running sum;
    // the weights' own dequantized values carry the rounding of d*sc*q in the reference.
    const double fp_tol = 2e-5 * (mag_q + mag) + 1e-30;
    const double ref = vec_dot_ref(t, w.data(), x.data(), n);

    const float scalar = cpu::quant_kernels_scalar(t).vec_dot(w.data(), xq.data(), n);
    EXPECT_NEAR(scalar, exact_q, fp_tol + s_err) << type_name(t) << " rep " << rep;
    // Against unquantized activations: the bound is sum |w| * |x - x_q| (+ s rounding).
    EXPECT_NEAR(scalar, ref, quant_err + s_err + fp_tol) << type_name(t) << " rep " << rep;
    // And as a relative statement: 8-bit activations keep the error below 1% of sum |w*x|.
    EXPECT_LE(std::fabs(scalar - ref), 0.01 * mag + 1e-30) << type_name(t);

    if (cpu::has_avx2_kernels()) {
      const float fast = cpu::quant_kernels_avx2(t).vec_dot(w.data(), xq.data(), n);
      // Both follow the dot-product order of quant.h: the same bits.
      EXPECT_EQ(f32_to_bits(fast), f32_to_bits(scalar))
          << type_name(t) << " rep " << rep << ": " << fast << " vs " << scalar;
      EXPECT_NEAR(fast, ref, quant_err + s_err + fp_tol) << type_name(t) << " rep " << rep;
    }
  }
}

TEST_P(QuantTypeTest, PublicApiDispatches) {
  const GgmlType t = GetParam();
  std::mt19937 rng(99);
  const int64_t n = test_len(t);
  const auto w = random_weights(t, n, rng);
  const auto x = random_activations(n, rng, false);
  std::vector<float> a(n), b(n);
  dequantize_row(t, w.data(), a.data(), n);
  dequantize_row_ref(t, w.data(), b.data(), n);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)));
  std::vector<uint8_t> xq(activation_row_bytes(t, n));
  EXPECT_EQ(quantize_activations(t, x.data(), xq.data(), n), xq.size());
  const double ref = vec_dot_ref(t, w.data(), x.data(), n);
  double mag = 0;
  for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(b[i]) * x[i]);
  EXPECT_NEAR(vec_dot(t, w.data(), xq.data(), n), ref, 0.01 * mag);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantTypeTest, testing::ValuesIn(kWeightTypes), type_label);

TEST(QuantActivations, Q8KUsesSignedMaxAndClamps) {
  std::vector<float> x(256, 0.25f);
  x[10] = -2.0f;  // largest magnitude is negative: iscale = -127 / -2 > 0
  x[20] = 2.0f;   // equal magnitude, positive, later: must not replace x[10]
  BlockQ8_K b{};
  cpu::quant_kernels_scalar(GgmlType::Q4_K).quantize(x.data(), &b, 256);
  EXPECT_EQ(b.qs[10], -127);
  EXPECT_EQ(b.qs[20], 127);
  EXPECT_FLOAT_EQ(b.d, 2.0f / 127.0f);
  int s = 0;
  for (int j = 0; j < 16; ++j) s += b.qs[j];
  EXPECT_EQ(b.bsums[0], s);
}

TEST(QuantActivations, Q81SumAndRoundHalfEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1, id = 1
  x[1] = 2.5f;    // tie -> 2
  x[2] = 3.5f;    // tie -> 4
  x[3] = -2.5f;   // tie -> -2
  BlockQ8_1 b{};
  cpu::quant_kernels_scalar(GgmlType::Q4_1).quantize(x.data(), &b, 32);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], -2);
  EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
  EXPECT_EQ(fp16_to_f32(b.s), 127.0f + 2 + 4 - 2);
}

}  // namespace
}  // namespace sieve

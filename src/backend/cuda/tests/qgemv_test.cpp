// Quantized GEMV (qmatmul.h) against float64 references built from the CPU dequantization:
// random blocks of every type (random quant bytes, random fp16 scales), awkward shapes, n_tok
// 1..8, strides, accumulate, a reused quantized input, every threads-per-row choice.
//
// Tolerances. The kernel computes dequant(W) . x8 exactly up to fp32 rounding, where x8 is the
// int8 activation it reads back from the workspace: |y - ref8| <= 1e-5 * mag with mag the sum of
// |w x8| (plus the separately applied min terms, which can cancel against the quants). Against
// the bf16 input, the quantization adds at most d/2 = amax/254 per element, so
// |y - ref| <= sum |w| * d / 2 over the blocks (+ the same rounding term): a bound, not a guess.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_test_util.h"
#include "backend/cuda/qmatmul.h"
#include "backend/cuda/tests/qgemv_ref.h"
#include "backend/cuda/tests/test_util.h"
#include "core/fp16.h"

namespace sieve::cuda::test {
namespace {

struct qcase {
  GgmlType type = GgmlType::Q4_K;
  int64_t rows = 1, cols = 256;
  int n_tok = 1;
  int64_t ldx_pad = 0, ldy_pad = 0;
  bool accumulate = false;
  int tpr = 0;
  bool pdl = false;
};

std::string describe(const qcase& c) {
  return std::string(type_name(c.type)) + " " + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + " n_tok=" + std::to_string(c.n_tok) + " ldx+" +
         std::to_string(c.ldx_pad) + " ldy+" + std::to_string(c.ldy_pad) +
         (c.accumulate ? " acc" : "") + " tpr=" + std::to_string(c.tpr) + (c.pdl ? " pdl" : "");
}

// Host copy of a quantized workspace.
struct qx {
  std::vector<int8_t> q;   // [n_tok, cols]
  std::vector<float> d;    // [n_tok, cols / 32]
  std::vector<float> sum;  // [n_tok, cols / 32]
};

qx read_workspace(const dbuf<uint8_t>& ws, int64_t cols, int n_tok) {
  const std::vector<uint8_t> h = ws.get();
  qx o;
  const size_t nq = static_cast<size_t>(cols) * n_tok, nb = nq / 32;
  o.q.resize(nq);
  std::memcpy(o.q.data(), h.data(), nq);
  o.d.resize(nb);
  o.sum.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    std::memcpy(&o.d[b], h.data() + nq + 8 * b, 4);
    std::memcpy(&o.sum[b], h.data() + nq + 8 * b + 4, 4);
  }
  return o;
}

// The quantized activations: d = amax / 127 exactly, q = x / d to nearest, sum = sum of q.
void check_quantized(const qx& a, const std::vector<uint16_t>& x, int64_t ldx, int64_t cols,
                     int n_tok) {
  for (int t = 0; t < n_tok; ++t)
    for (int64_t b = 0; b < cols / 32; ++b) {
      float amax = 0.f;
      for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(bf16_to_f32(x[t * ldx + b * 32 + i])));
      const size_t bi = static_cast<size_t>(t) * (cols / 32) + b;
      ASSERT_EQ(a.d[bi], amax / 127.f) << "token " << t << " block " << b;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const size_t e = static_cast<size_t>(t) * cols + b * 32 + i;
        const float v = bf16_to_f32(x[t * ldx + b * 32 + i]);
        if (amax == 0.f) {
          ASSERT_EQ(a.q[e], 0);
        } else {
          ASSERT_LE(std::fabs(a.q[e] - static_cast<double>(v) / a.d[bi]), 0.5 + 1e-4)
              << "token " << t << " element " << b * 32 + i;
        }
        sum += a.q[e];
      }
      ASSERT_EQ(a.sum[bi], static_cast<float>(sum));
    }
}

void run_case(const qcase& c, std::mt19937& rng) {
  SCOPED_TRACE(describe(c));
  const int64_t rb = qrow_bytes(c.type, c.cols);
  std::vector<uint8_t> w = testutil::random_weights(c.type, c.rows * c.cols, rng);
  w.resize(w.size() + 16);  // the kernels may read the word that holds W's last byte
  const int64_t ldx = c.cols + c.ldx_pad, ldy = c.rows + c.ldy_pad;
  std::vector<uint16_t> x = random_half(static_cast<size_t>(c.n_tok) * ldx, dtype::bf16, rng);
  if (c.cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, uint16_t{0});  // d = 0 block
  std::vector<float> y0(static_cast<size_t>(c.n_tok) * ldy);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : y0) v = nd(rng);

  dbuf<uint8_t> dw(w), ws(static_cast<size_t>(qgemv_workspace_bytes(c.cols, c.n_tok)));
  dbuf<uint16_t> dx(x);
  dbuf<float> dy(y0);
  qgemv_params p;
  p.w = dw.p;
  p.type = c.type;
  p.rows = c.rows;
  p.cols = c.cols;
  p.x = reinterpret_cast<const __nv_bfloat16*>(dx.p);
  p.ldx = ldx;
  p.n_tok = c.n_tok;
  p.y = dy.p;
  p.ldy = ldy;
  p.accumulate = c.accumulate;
  p.workspace = ws.p;
  p.threads_per_row = c.tpr;
  p.pdl = c.pdl;
  CUDA_OK(launch_qgemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.get();
  const qx a = read_workspace(ws, c.cols, c.n_tok);
  check_quantized(a, x, ldx, c.cols, c.n_tok);
  if (::testing::Test::HasFatalFailure()) return;

  std::vector<float> wf(static_cast<size_t>(c.cols));
  double worst8 = 0, worst = 0;
  int bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    dequantize_row_ref(c.type, w.data() + r * rb, wf.data(), c.cols);
    const std::vector<double> mins = min_terms(c.type, w.data() + r * rb, c.cols);
    for (int t = 0; t < c.n_tok; ++t) {
      double ref8 = 0, ref = 0, mag = 0, qbound = 0;
      for (int64_t i = 0; i < c.cols; ++i) {
        const size_t e = static_cast<size_t>(t) * c.cols + i;
        const double d = a.d[e / 32];
        const double x8 = a.q[e] * d;
        ref8 += wf[i] * x8;
        ref += wf[i] * static_cast<double>(bf16_to_f32(x[t * ldx + i]));
        mag += (std::fabs(wf[i]) + 2 * mins[i]) * std::fabs(x8);
        qbound += std::fabs(wf[i]) * d * 0.5;
      }
      const double y_in = c.accumulate ? y0[t * ldy + r] : 0.0;
      const double got = y[t * ldy + r];
      const double tol = 1e-5 * mag + 6e-8 * std::fabs(y_in) + 1e-30;
      const double e8 = std::fabs(got - (y_in + ref8)), e = std::fabs(got - (y_in + ref));
      worst8 = std::max(worst8, e8 / (tol + 1e-300));
      worst = std::max(worst, e / (qbound * (1 + 1e-6) + tol));
      if ((!(e8 <= tol) || !(e <= qbound * (1 + 1e-6) + tol)) && bad++ < 5)
        ADD_FAILURE() << "row " << r << " token " << t << ": got " << got << " ref(x8) "
                      << y_in + ref8 << " ref(x) " << y_in + ref << " tol " << tol
                      << " quantization bound " << qbound;
    }
  }
  // rows past `rows` inside ldy are left alone
  for (int t = 0; t < c.n_tok; ++t)
    for (int64_t r = c.rows; r < ldy; ++r)
      ASSERT_EQ(y[t * ldy + r], y0[t * ldy + r]) << "wrote past the rows, token " << t;
  EXPECT_EQ(bad, 0) << "worst error / tolerance: vs x8 " << worst8 << ", vs x " << worst;
}

std::vector<std::pair<int64_t, int64_t>> shapes(GgmlType t) {
  if (is_k(t)) return {{1, 256}, {7, 512}, {33, 1536}, {130, 1280}, {37, 8960}};
  // cols not a multiple of 256, odd block counts (rows start 2 bytes into a word)
  return {{1, 32}, {7, 96}, {33, 1056}, {130, 640}, {37, 8960}};
}

TEST(CudaQgemv, EveryTypeShapeAndTokenCount) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(40);
  for (GgmlType t : k_qgemv_types)
    for (auto [rows, cols] : shapes(t))
      for (int n_tok : {1, 2, 3, 8}) {
        qcase c;
        c.type = t;
        c.rows = rows;
        c.cols = cols;
        c.n_tok = n_tok;
        run_case(c, rng);
      }
}

TEST(CudaQgemv, AllTokenCountsStridesAndAccumulate) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(41);
  for (GgmlType t : k_qgemv_types)
    for (int n_tok = 1; n_tok <= qgemv_max_tok; ++n_tok) {
      qcase c;
      c.type = t;
      c.rows = 21;
      c.cols = is_k(t) ? 768 : 160;
      c.n_tok = n_tok;
      c.ldx_pad = 40;
      c.ldy_pad = 3;
      c.accumulate = n_tok % 2 == 0;
      c.pdl = n_tok >= 4;
      run_case(c, rng);
    }
}

TEST(CudaQgemv, EveryThreadsPerRow) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(42);
  for (GgmlType t : k_qgemv_types)
    for (int tpr : {32, 64, 128})
      for (int n_tok : {1, 5}) {
        qcase c;
        c.type = t;
        c.rows = 19;
        c.cols = is_k(t) ? 2304 : 1248;
        c.n_tok = n_tok;
        c.tpr = tpr;
        run_case(c, rng);
      }
}

// A second product over the same input reuses the workspace's quantized activations.
TEST(CudaQgemv, ReusesQuantizedInput) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(43);
  const int64_t rows = 45, cols = 1024;
  const int n_tok = 3;
  const std::vector<uint16_t> x = random_half(static_cast<size_t>(n_tok) * cols, dtype::bf16, rng);
  dbuf<uint16_t> dx(x);
  dbuf<uint8_t> ws(static_cast<size_t>(qgemv_workspace_bytes(cols, n_tok)));
  CUDA_OK(launch_qgemv_quantize(reinterpret_cast<const __nv_bfloat16*>(dx.p), cols, n_tok, cols,
                                ws.p, nullptr));
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0}) {
    SCOPED_TRACE(type_name(t));
    std::vector<uint8_t> w = testutil::random_weights(t, rows * cols, rng);
    w.resize(w.size() + 16);
    dbuf<uint8_t> dw(w);
    dbuf<float> dy(static_cast<size_t>(n_tok) * rows);
    dy.poison();
    qgemv_params p;
    p.w = dw.p;
    p.type = t;
    p.rows = rows;
    p.cols = cols;
    p.n_tok = n_tok;
    p.y = dy.p;
    p.ldy = rows;
    p.workspace = ws.p;
    p.x_quantized = true;
    CUDA_OK(launch_qgemv(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> y = dy.get();
    const qx a = read_workspace(ws, cols, n_tok);
    std::vector<float> wf(cols);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row_ref(t, w.data() + r * qrow_bytes(t, cols), wf.data(), cols);
      const std::vector<double> mins = min_terms(t, w.data() + r * qrow_bytes(t, cols), cols);
      for (int tok = 0; tok < n_tok; ++tok) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < cols; ++i) {
          const size_t e = static_cast<size_t>(tok) * cols + i;
          const double x8 = a.q[e] * static_cast<double>(a.d[e / 32]);
          ref += wf[i] * x8;
          mag += (std::fabs(wf[i]) + 2 * mins[i]) * std::fabs(x8);
        }
        ASSERT_NEAR(y[tok * rows + r], ref, 1e-5 * mag + 1e-30) << "row " << r << " token " << tok;
      }
    }
  }
}

// Argument checks need no device: nothing is launched.
TEST(CudaQgemv, RejectsBadArguments) {
  EXPECT_TRUE(qgemv_supported(GgmlType::Q4_K));
  EXPECT_TRUE(qgemv_supported(GgmlType::Q5_0));
  EXPECT_FALSE(qgemv_supported(GgmlType::BF16));
  EXPECT_FALSE(qgemv_supported(GgmlType::Q2_K));
  EXPECT_EQ(qrow_bytes(GgmlType::Q6_K, 512), 420);
  EXPECT_EQ(qrow_bytes(GgmlType::Q5_0, 96), 66);
  EXPECT_EQ(qgemv_workspace_bytes(256, 2), 512 + 16 * 8);
  alignas(16) static uint8_t buf[4096];
  qgemv_params p;
  p.w = buf;
  p.type = GgmlType::Q4_K;
  p.rows = 4;
  p.cols = 256;
  p.x = reinterpret_cast<const __nv_bfloat16*>(buf);
  p.ldx = 256;
  p.y = reinterpret_cast<float*>(buf);
  p.ldy = 4;
  p.workspace = buf;
  auto bad = [&](auto edit) {
    qgemv_params q = p;
    edit(q);
    return launch_qgemv(q, nullptr) == cudaErrorInvalidValue;
  };
  EXPECT_TRUE(bad([](qgemv_params& q) { q.type = GgmlType::F16; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.cols = 288; }));  // K-quants need 256 | cols
  EXPECT_TRUE(bad([](qgemv_params& q) { q.n_tok = 0; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.n_tok = qgemv_max_tok + 1; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.ldx = 255; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.ldy = 3; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.w = buf + 2; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.workspace = buf + 8; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.threads_per_row = 96; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.x = nullptr; }));
  EXPECT_TRUE(bad([](qgemv_params& q) { q.rows = 0; }));
  EXPECT_TRUE(bad([](qgemv_params& q) {
    q.type = GgmlType::Q8_0;
    q.cols = 48;
  }));
}

}  // namespace
}  // namespace sieve::cuda::test

// matmul against a double-precision reference for every weight type, awkward shapes and
// 1, 2 and 3 threads, through both the AVX2 and the scalar paths.
//
// Tolerance: the kernels quantize activations (as llama.cpp does), so each output may differ
// from sum_c W[r,c] * x[i,c] by at most sum_c |W[r,c]| * |x[i,c] - xq[i,c]| (xq: the
// activations as quantized, decoded exactly), plus the Q8_1 s rounding, plus float rounding
// (2e-5 of sum |W * x|). Against the double dot on the quantized activations themselves
// only the float rounding terms remain, which catches any wrong integer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_gemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_test_util.h"
#include "core/fp16.h"
#include "core/thread_pool.h"

namespace sieve {
namespace {

using namespace testutil;

// Per-element decode of activations after quantize_activations (scalar kernels).
std::vector<double> decode_activations(GgmlType w, const std::vector<uint8_t>& xq, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  const uint8_t* p = xq.data();
  switch (vec_dot_type(w)) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) out[i] = reinterpret_cast<const float*>(p)[i];
      break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
      break;
    case GgmlType::Q8_0:
      for (int64_t i = 0; i < n; ++i) {
        const auto& b = reinterpret_cast<const BlockQ8_0*>(p)[i / 32];
        out[i] = static_cast<double>(fp16_to_f32(b.d)) * b.qs[i % 32];
      }
      break;
    case GgmlType::Q8_1:
      for (int64_t i = 0; i < n; ++i) {
        const auto& b = reinterpret_cast<const BlockQ8_1*>(p)[i / 32];
        out[i] = static_cast<double>(fp16_to_f32(b.d)) * b.qs[i % 32];
      }
      break;
    case GgmlType::Q8_K:
      for (int64_t i = 0; i < n; ++i) {
        const auto& b = reinterpret_cast<const BlockQ8_K*>(p)[i / 256];
        out[i] = static_cast<double>(b.d) * b.qs[i % 256];
      }
      break;
    default:
      std::abort();
  }
  return out;
}

struct Problem {
  GgmlType t;
  int64_t m, n_rows, n_cols;
  std::vector<uint8_t> w;
  std::vector<float> x;
  std::vector<double> ref;    // [m, n_rows] exact dot on unquantized x
  std::vector<double> ref_q;  // [m, n_rows] exact dot on the quantized x
  std::vector<double> tol_q;  // float-rounding tolerance (vs ref_q)
  std::vector<double> tol;    // full tolerance (vs ref)
};

Problem make_problem(GgmlType t, int64_t m, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p{t, m, n_rows, n_cols, random_weights(t, n_rows * n_cols, rng), {}, {}, {}, {}, {}};
  p.x = random_activations(m * n_cols, rng, false);
  std::vector<float> wf(static_cast<size_t>(n_rows * n_cols));
  const int64_t wrow = row_bytes(t, n_cols);
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row_ref(t, p.w.data() + r * wrow, wf.data() + r * n_cols, n_cols);
  }
  // Per-row |m| of Q4_1/Q5_1 blocks for the s-rounding term.
  const bool q81 = vec_dot_type(t) == GgmlType::Q8_1;
  p.ref.resize(m * n_rows), p.ref_q.resize(m * n_rows), p.tol.resize(m * n_rows),
      p.tol_q.resize(m * n_rows);
  std::vector<uint8_t> xq(activation_row_bytes(t, n_cols));
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = p.x.data() + i * n_cols;
    cpu::quant_kernels_scalar(t).quantize(xi, xq.data(), n_cols);
    const auto xd = decode_activations(t, xq, n_cols);
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* wr = wf.data() + r * n_cols;
      double s = 0, sq = 0, mag = 0, qerr = 0, serr = 0;
      for (int64_t c = 0; c < n_cols; ++c) {
        s += static_cast<double>(wr[c]) * xi[c];
        sq += static_cast<double>(wr[c]) * xd[c];
        mag += std::fabs(static_cast<double>(wr[c]) * xi[c]) +
               std::fabs(static_cast<double>(wr[c]) * xd[c]);
        qerr += std::fabs(static_cast<double>(wr[c])) * std::fabs(xi[c] - xd[c]);
      }
      if (q81) {
        for (int64_t b = 0; b < n_cols / 32; ++b) {
          const auto& xb = reinterpret_cast<const BlockQ8_1*>(xq.data())[b];
          const uint8_t* wb = p.w.data() + r * wrow + b * type_info(t)->type_size;
          uint16_t mh;
          std::memcpy(&mh, wb + 2, 2);  // Q4_1 and Q5_1 both keep m at bytes 2..3
          int sum = 0;
          for (int j = 0; j < 32; ++j) sum += xb.qs[j];
          serr += std::fabs(static_cast<double>(fp16_to_f32(mh))) *
                  std::fabs(static_cast<double>(fp16_to_f32(xb.s)) -
                            static_cast<double>(fp16_to_f32(xb.d)) * sum);
        }
      }
      const double fp = 2e-5 * mag + 1e-30;
      p.ref[i * n_rows + r] = s;
      p.ref_q[i * n_rows + r] = sq;
      p.tol_q[i * n_rows + r] = fp + 2 * serr;
      p.tol[i * n_rows + r] = fp + 2 * serr + qerr;
    }
  }
  return p;
}

void check(const Problem& p, const std::vector<float>& y, const char* what, int threads) {
  int bad = 0;
  for (int64_t k = 0; k < p.m * p.n_rows && bad < 5; ++k) {
    const bool ok_q = std::fabs(y[k] - p.ref_q[k]) <= p.tol_q[k];
    const bool ok = std::fabs(y[k] - p.ref[k]) <= p.tol[k];
    if (!ok_q || !ok) {
      ++bad;
      ADD_FAILURE() << what << " " << type_name(p.t) << " m=" << p.m << " n_rows=" << p.n_rows
                    << " n_cols=" << p.n_cols << " threads=" << threads << " at (" << k / p.n_rows
                    << "," << k % p.n_rows << "): got " << y[k] << " ref " << p.ref[k] << " (tol "
                    << p.tol[k] << ") ref_q " << p.ref_q[k] << " (tol " << p.tol_q[k] << ")";
    }
  }
}

int64_t cols_for(GgmlType t) {
  switch (type_info(t)->block_size) {
    case 1:
      return 100;  // not a multiple of 8: exercises the tails of the float kernels
    case 32:
      return 320;
    default:
      return 768;
  }
}

class MatmulTypeTest : public testing::TestWithParam<GgmlType> {};

TEST_P(MatmulTypeTest, MatchesDoubleReference) {
  const GgmlType t = GetParam();
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  MatmulScratch scratch;
  uint32_t seed = 1;
  for (int64_t m : {1, 3, 17, 64}) {
    for (int64_t n_rows : {1, 7, 97, 576}) {
      const Problem p =
          make_problem(t, m, n_rows, cols_for(t), seed++ * 7919 + static_cast<uint32_t>(t));
      for (int th = 0; th < 3; ++th) {
        for (bool avx2 : {true, false}) {
          if (avx2 && !cpu::has_avx2_kernels()) continue;
          std::vector<float> y(m * n_rows, std::nanf(""));
          cpu::matmul_isa({t, p.w.data(), n_rows, p.n_cols}, p.x.data(), m, y.data(), pools[th],
                          scratch, avx2);
          check(p, y, avx2 ? "avx2" : "scalar", th + 1);
        }
      }
    }
  }
}

// The GEMM (m > 1) and the decode path (m == 1) see identical activation bytes and compute the
// same dot-product order: row by row they agree bit for bit.
TEST_P(MatmulTypeTest, BatchRowsEqualSingleRows) {
  if (!cpu::has_avx2_kernels()) GTEST_SKIP() << "no AVX2";
  const GgmlType t = GetParam();
  const int64_t n = cols_for(t) * 2, n_rows = 33, m = 9;
  std::mt19937 rng(5);
  const auto w = random_weights(t, n_rows * n, rng);
  const auto x = random_activations(m * n, rng, false);
  ThreadPool pool(2);
  MatmulScratch scratch;
  std::vector<float> y(m * n_rows), y1(n_rows);
  const WeightView wv{t, w.data(), n_rows, n};
  cpu::matmul_isa(wv, x.data(), m, y.data(), pool, scratch, true);
  for (int64_t i = 0; i < m; ++i) {
    cpu::matmul_isa(wv, x.data() + i * n, 1, y1.data(), pool, scratch, true);
    for (int64_t r = 0; r < n_rows; ++r) {
      EXPECT_EQ(f32_to_bits(y[i * n_rows + r]), f32_to_bits(y1[r]))
          << type_name(t) << " " << i << "," << r << ": " << y[i * n_rows + r] << " vs " << y1[r];
    }
  }
}

// Bitwise equality of output rows, reported with the first differing element.
::testing::AssertionResult same_row(const float* got, const float* want, int64_t n,
                                    const std::string& what) {
  if (std::memcmp(got, want, static_cast<size_t>(n) * sizeof(float)) == 0)
    return ::testing::AssertionSuccess();
  int64_t c = 0;
  while (f32_to_bits(got[c]) == f32_to_bits(want[c])) ++c;
  char buf[128];
  std::snprintf(buf, sizeof(buf), "column %lld: got %.9g (0x%08x) want %.9g (0x%08x)",
                static_cast<long long>(c), got[c], f32_to_bits(got[c]), want[c],
                f32_to_bits(want[c]));
  return ::testing::AssertionFailure() << what << ": " << buf;
}

// Batch invariance (the continuous-batching scheduler relies on it: a request's greedy tokens
// must not depend on what it was batched with). Every output row of a batch of m rows must
// equal, byte for byte, the same row computed alone (m == 1: the decode kernels), and in
// random sub-batches (random rows in random order, so the row lands at other positions of the
// GEMM tiles, groups and tails), through matmul and through matmul_multi next to another
// product, with 1, 2 and 3 threads, on the AVX2 and the scalar path.
TEST_P(MatmulTypeTest, BatchInvariantBitwise) {
  const GgmlType t = GetParam();
  const int64_t n = cols_for(t);
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  MatmulScratch scratch;
  std::mt19937 rng(1000 + static_cast<uint32_t>(t));
  // 203 rows: above the size where jobs go parallel, not a multiple of any tile; 5: fewer rows
  // than one decode group.
  for (int64_t n_rows : {int64_t{203}, int64_t{5}}) {
    const int64_t n_rows2 = 29;
    const auto w = random_weights(t, n_rows * n, rng);
    const auto w2 = random_weights(t, n_rows2 * n, rng);
    const WeightView wv{t, w.data(), n_rows, n}, wv2{t, w2.data(), n_rows2, n};
    for (int64_t m : {1, 2, 5, 16, 17, 33, 512}) {
      const auto x = random_activations(m * n, rng, m % 2 == 1);
      for (bool avx2 : {true, false}) {
        if (avx2 && !cpu::has_avx2_kernels()) continue;
        const std::string tag = std::string(type_name(t)) + (avx2 ? " avx2" : " scalar") +
                                " n_rows=" + std::to_string(n_rows) + " m=" + std::to_string(m);
        std::vector<float> ref(m * n_rows), ref2(m * n_rows2);
        cpu::matmul_isa(wv, x.data(), m, ref.data(), pools[0], scratch, avx2);
        cpu::matmul_isa(wv2, x.data(), m, ref2.data(), pools[0], scratch, avx2);

        // The whole batch with 2 and 3 threads.
        std::vector<float> y(m * n_rows);
        for (int th = 1; th < 3; ++th) {
          cpu::matmul_isa(wv, x.data(), m, y.data(), pools[th], scratch, avx2);
          for (int64_t i = 0; i < m; ++i) {
            ASSERT_TRUE(
                same_row(&y[i * n_rows], &ref[i * n_rows], n_rows,
                         tag + " threads=" + std::to_string(th + 1) + " row " + std::to_string(i)));
          }
        }
        // Each row alone (decode), row i with 1 + i % 3 threads (for m = 512, every 11th row:
        // pool wake-ups dominate the test's time).
        for (int th = 0; th < 3; ++th) {
          for (int64_t i = th; i<m; i += m> 64 ? 33 : 3) {
            cpu::matmul_isa(wv, x.data() + i * n, 1, y.data(), pools[th], scratch, avx2);
            ASSERT_TRUE(same_row(
                y.data(), &ref[i * n_rows], n_rows,
                tag + " alone, threads=" + std::to_string(th + 1) + " row " + std::to_string(i)));
          }
        }
        // Random sub-batches of random rows in random order.
        std::vector<int64_t> order(m);
        for (int64_t i = 0; i < m; ++i) order[i] = i;
        for (int rep = 0; rep < 4; ++rep) {
          std::shuffle(order.begin(), order.end(), rng);
          const int64_t k = std::uniform_int_distribution<int64_t>(1, m)(rng);
          const int th = static_cast<int>(rng() % 3);
          std::vector<float> xs(k * n), ys(k * n_rows), ys2(k * n_rows2);
          for (int64_t j = 0; j < k; ++j)
            std::copy_n(x.data() + order[j] * n, n, xs.data() + j * n);
          const bool multi = rep % 2 == 1;
          if (multi) {
            const MatmulTarget targets[2] = {{wv2, ys2.data()}, {wv, ys.data()}};
            cpu::matmul_multi_isa(targets, 2, xs.data(), k, pools[th], scratch, avx2);
          } else {
            cpu::matmul_isa(wv, xs.data(), k, ys.data(), pools[th], scratch, avx2);
          }
          for (int64_t j = 0; j < k; ++j) {
            const std::string where = tag + (multi ? " multi" : "") + " sub-batch of " +
                                      std::to_string(k) + ", threads=" + std::to_string(th + 1) +
                                      ": row " + std::to_string(order[j]) + " at " +
                                      std::to_string(j);
            ASSERT_TRUE(same_row(&ys[j * n_rows], &ref[order[j] * n_rows], n_rows, where));
            if (multi) {
              ASSERT_TRUE(
                  same_row(&ys2[j * n_rows2], &ref2[order[j] * n_rows2], n_rows2, where + " (2)"));
            }
          }
        }
      }
    }
  }
}

// Every path computes the dot-product order of quant.h, which the scalar vec_dot spells out:
// the AVX2 matmul (decode and GEMM), the scalar matmul and both ISAs' vec_dot give its bits.
TEST_P(MatmulTypeTest, EqualsScalarVecDotBitwise) {
  const GgmlType t = GetParam();
  const int64_t n = cols_for(t) * 2 + (type_info(t)->block_size == 1 ? 5 : 0), n_rows = 45;
  std::mt19937 rng(23 + static_cast<uint32_t>(t));
  const auto w = random_weights(t, n_rows * n, rng);
  const size_t wrow = static_cast<size_t>(row_bytes(t, n));
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (int64_t m : {1, 11}) {
    const auto x = random_activations(m * n, rng, true);
    std::vector<float> want(m * n_rows);
    std::vector<uint8_t> xq(activation_row_bytes(t, n));
    for (int64_t i = 0; i < m; ++i) {
      cpu::quant_kernels_scalar(t).quantize(x.data() + i * n, xq.data(), n);
      for (int64_t r = 0; r < n_rows; ++r) {
        want[i * n_rows + r] =
            cpu::quant_kernels_scalar(t).vec_dot(w.data() + r * wrow, xq.data(), n);
        if (cpu::has_avx2_kernels()) {
          const float v = cpu::quant_kernels_avx2(t).vec_dot(w.data() + r * wrow, xq.data(), n);
          ASSERT_EQ(f32_to_bits(v), f32_to_bits(want[i * n_rows + r]))
              << type_name(t) << " avx2 vec_dot row " << r;
        }
      }
    }
    for (bool avx2 : {true, false}) {
      if (avx2 && !cpu::has_avx2_kernels()) continue;
      std::vector<float> y(m * n_rows);
      cpu::matmul_isa({t, w.data(), n_rows, n}, x.data(), m, y.data(), pool, scratch, avx2);
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_TRUE(same_row(&y[i * n_rows], &want[i * n_rows], n_rows,
                             std::string(type_name(t)) + (avx2 ? " avx2" : " scalar") +
                                 " m=" + std::to_string(m) + " row " + std::to_string(i)));
      }
    }
  }
}

TEST_P(MatmulTypeTest, GetRowDequantizes) {
  const GgmlType t = GetParam();
  const int64_t n = cols_for(t), n_rows = 5;
  std::mt19937 rng(11);
  const auto w = random_weights(t, n_rows * n, rng);
  std::vector<float> a(n), b(n);
  for (int64_t r = 0; r < n_rows; ++r) {
    get_row({t, w.data(), n_rows, n}, r, a.data());
    dequantize_row_ref(t, w.data() + r * row_bytes(t, n), b.data(), n);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)))
        << type_name(t) << " row " << r;
  }
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTypeTest, testing::ValuesIn(kTypes),
                         [](const testing::TestParamInfo<GgmlType>& p) {
                           return std::string(type_name(p.param));
                         });

// matmul_multi gives each product exactly what a separate matmul() gives (same activation
// bytes, same kernels, same row split), for mixed weight types sharing one input.
TEST(MatmulMulti, EqualsSeparateCalls) {
  const int64_t n = 512;
  const GgmlType types[] = {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_K,
                            GgmlType::F16,  GgmlType::Q4_1, GgmlType::Q6_K};
  const int64_t rows[] = {37, 64, 9, 128, 5, 1, 33};
  std::mt19937 rng(17);
  std::vector<std::vector<uint8_t>> ws;
  for (int j = 0; j < 7; ++j) ws.push_back(random_weights(types[j], rows[j] * n, rng));
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (bool avx2 : {true, false}) {
    if (avx2 && !cpu::has_avx2_kernels()) continue;
    for (int64_t m : {1, 2, 17}) {
      const auto x = random_activations(m * n, rng, false);
      std::vector<std::vector<float>> multi(7), single(7);
      std::vector<MatmulTarget> targets;
      for (int j = 0; j < 7; ++j) {
        multi[j].assign(m * rows[j], -1.0f);
        single[j].assign(m * rows[j], -2.0f);
        targets.push_back({{types[j], ws[j].data(), rows[j], n}, multi[j].data()});
      }
      cpu::matmul_multi_isa(targets.data(), 7, x.data(), m, pool, scratch, avx2);
      for (int j = 0; j < 7; ++j) {
        cpu::matmul_isa(targets[j].w, x.data(), m, single[j].data(), pool, scratch, avx2);
        for (int64_t k = 0; k < m * rows[j]; ++k) {
          ASSERT_EQ(multi[j][k], single[j][k])
              << type_name(types[j]) << " m=" << m << " avx2=" << avx2 << " at " << k;
        }
      }
    }
  }
}

// Decode splits the targets' 8-row groups across threads as one sequence weighted by bytes:
// with any thread count every row is written once and equals the one-thread result, also
// for row counts that are not multiples of 8, types of different row sizes, and more threads
// than a target has groups.
TEST(MatmulMulti, DecodeSplitAcrossThreadsEqualsOneThread) {
  if (!cpu::has_avx2_kernels()) GTEST_SKIP() << "no AVX2";
  const int64_t n = 576;
  const GgmlType types[] = {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q5_0};
  const int64_t rows[] = {203, 20, 7, 96};  // every job over kMinParallelBytes
  std::mt19937 rng(23);
  std::vector<std::vector<uint8_t>> ws;
  for (int j = 0; j < 4; ++j) ws.push_back(random_weights(types[j], rows[j] * n, rng));
  const auto x = random_activations(n, rng, false);
  std::vector<std::vector<float>> want(4);
  MatmulScratch scratch;
  for (int threads : {1, 2, 3, 7, 16, 40}) {
    ThreadPool pool(threads);
    std::vector<std::vector<float>> got(4);
    std::vector<MatmulTarget> targets;
    for (int j = 0; j < 4; ++j) {
      got[j].assign(rows[j], std::numeric_limits<float>::quiet_NaN());
      targets.push_back({{types[j], ws[j].data(), rows[j], n}, got[j].data()});
    }
    cpu::matmul_multi_isa(targets.data(), 4, x.data(), 1, pool, scratch, true);
    if (threads == 1) want = got;
    for (int j = 0; j < 4; ++j) {
      for (int64_t r = 0; r < rows[j]; ++r) {
        ASSERT_FALSE(std::isnan(got[j][r])) << "row " << r << " of target " << j << " unwritten";
        ASSERT_EQ(got[j][r], want[j][r]) << threads << " threads, target " << j << " row " << r;
      }
    }
  }
}

// The public entry point (dispatching on SIEVE_SIMD) on a model-like shape.
TEST(Matmul, PublicEntryPointSmolLmShape) {
  const GgmlType t = GgmlType::Q4_1;
  const Problem p = make_problem(t, 5, 192, 576, 42);
  ThreadPool pool(2);
  MatmulScratch scratch;
  std::vector<float> y(p.m * p.n_rows);
  matmul({t, p.w.data(), p.n_rows, p.n_cols}, p.x.data(), p.m, y.data(), pool, scratch);
  check(p, y, "public", 2);
}

}  // namespace
}  // namespace sieve

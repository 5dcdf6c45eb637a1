// The quantized GEMV's per-type block code (kernels/qgemv_blocks.cuh) run on the CPU: the same
// chunk routines the kernel calls, with host versions of the three intrinsics they use, over
// every chunk of every row, against float64 dot products of the CPU dequantization and the
// int8 activations. Runs without a GPU, so the layouts (nibble order, 5th/6th bits, Q4_K scale
// packing, the aligned windows around 2-byte-aligned blocks) are checked everywhere; the
// kernel's row groups, reductions and stores are left to qgemv_test.cpp on a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_test_util.h"
#include "backend/cuda/tests/qgemv_ref.h"

// Host versions of the device intrinsics (the PTX semantics: bytes as signed int8 in dp4a;
// funnel shift of hi:lo right by sh mod 32).
template <class T>
static inline T __ldg(const T* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
static inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i)
    c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
  return c;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  const uint64_t v = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<unsigned>(v >> (sh & 31));
}

// (its `#pragma unroll` lines mean nothing to the host compiler: CMakeLists.txt silences
// -Wunknown-pragmas for this file)
#include "backend/cuda/kernels/qgemv_blocks.cuh"

namespace sieve::cuda::test {
namespace {

using qgemv::qtype;
using qgemv::traits;

// 16-byte aligned storage with slack (windows read whole aligned chunks).
template <class T>
struct aligned_buf {
  T* p;
  explicit aligned_buf(size_t n) {
    const size_t bytes = (n * sizeof(T) + 64 + 15) / 16 * 16;
    p = static_cast<T*>(std::aligned_alloc(16, bytes));
    std::memset(static_cast<void*>(p), 0xAB, bytes);
  }
  ~aligned_buf() { std::free(p); }
  aligned_buf(const aligned_buf&) = delete;
  aligned_buf& operator=(const aligned_buf&) = delete;
};

template <qtype Q, int NT, int R>
void check(GgmlType t, int rows, int cols, std::mt19937& rng) {
  SCOPED_TRACE(std::string(type_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
               " NT=" + std::to_string(NT) + " R=" + std::to_string(R));
  using T = traits<Q>;
  const std::vector<uint8_t> wv = testutil::random_weights(t, int64_t{rows} * cols, rng);
  const int64_t rb = row_bytes(t, cols);
  aligned_buf<uint8_t> w(wv.size());
  std::memcpy(w.p, wv.data(), wv.size());
  // x8 as the quantize kernel makes it: d = amax / 127, q = x / d to nearest, sum of q
  aligned_buf<int8_t> xq(static_cast<size_t>(NT) * cols);
  aligned_buf<float2> xs(static_cast<size_t>(NT) * cols / 32);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int tk = 0; tk < NT; ++tk)
    for (int b = 0; b < cols / 32; ++b) {
      float x[32], amax = 0.f;
      for (float& v : x) {
        v = nd(rng);
        amax = std::max(amax, std::fabs(v));
      }
      const float d = amax / 127.f;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int q = static_cast<int>(std::nearbyint(x[i] / d));
        xq.p[tk * cols + b * 32 + i] = static_cast<int8_t>(q);
        sum += q;
      }
      xs.p[tk * (cols / 32) + b] = make_float2(d, static_cast<float>(sum));
    }
  std::vector<float> wf(static_cast<size_t>(cols));
  const int chunks = cols / 32;
  for (int r0 = 0; r0 < rows; r0 += R) {
    float acc[R][NT] = {};
    for (int k = 0; k < chunks; ++k) {
      const int blk = k / T::chunks, sub = k % T::chunks;
      const uint8_t* wb[R];
      for (int r = 0; r < R; ++r)
        wb[r] = w.p + std::min(r0 + r, rows - 1) * rb + int64_t{blk} * T::block_bytes;
      T::template chunk<R, NT>(wb, sub, xq.p + int64_t{blk} * T::block_elems, cols,
                               xs.p + int64_t{blk} * (T::block_elems / 32), cols / 32, acc);
    }
    for (int r = 0; r < R && r0 + r < rows; ++r) {
      dequantize_row_ref(t, wv.data() + (r0 + r) * rb, wf.data(), cols);
      const std::vector<double> mins = min_terms(t, wv.data() + (r0 + r) * rb, cols);
      for (int tk = 0; tk < NT; ++tk) {
        double ref = 0, mag = 0;
        for (int i = 0; i < cols; ++i) {
          const double x8 =
              xq.p[tk * cols + i] * static_cast<double>(xs.p[tk * (cols / 32) + i / 32].x);
          ref += wf[i] * x8;
          mag += (std::fabs(wf[i]) + 2 * mins[i]) * std::fabs(x8);
        }
        ASSERT_NEAR(acc[r][tk], ref, 1e-5 * mag + 1e-30) << "row " << r0 + r << " token " << tk;
      }
    }
  }
}

template <qtype Q>
void check_type(GgmlType t, std::mt19937& rng) {
  // rows start at every offset mod 16 the type allows (odd block counts), K-quant cols to 9
  // blocks, legacy cols not a multiple of 256
  const std::vector<std::pair<int, int>> shapes =
      is_k(t) ? std::vector<std::pair<int, int>>{{3, 256}, {9, 768}, {5, 2304}}
              : std::vector<std::pair<int, int>>{{3, 32}, {9, 96}, {9, 1056}, {4, 1120}};
  for (auto [rows, cols] : shapes) {
    check<Q, 1, 1>(t, rows, cols, rng);
    check<Q, 3, 2>(t, rows, cols, rng);
    check<Q, 8, 4>(t, rows, cols, rng);
  }
}

TEST(CudaQgemvBlocks, ChunkRoutinesMatchTheCpuDequantization) {
  std::mt19937 rng(44);
  check_type<qtype::q4_0>(GgmlType::Q4_0, rng);
  check_type<qtype::q4_1>(GgmlType::Q4_1, rng);
  check_type<qtype::q5_0>(GgmlType::Q5_0, rng);
  check_type<qtype::q5_1>(GgmlType::Q5_1, rng);
  check_type<qtype::q8_0>(GgmlType::Q8_0, rng);
  check_type<qtype::q4_k>(GgmlType::Q4_K, rng);
  check_type<qtype::q5_k>(GgmlType::Q5_K, rng);
  check_type<qtype::q6_k>(GgmlType::Q6_K, rng);
}

// The byte picker that the 2-byte-aligned formats rely on, at every even offset.
TEST(CudaQgemvBlocks, WindowExtractsTheBytesAtEveryOffset) {
  alignas(16) uint8_t buf[64];
  for (int i = 0; i < 64; ++i) buf[i] = static_cast<uint8_t>(i * 7 + 3);
  for (int o = 0; o < 16; o += 2) {
    uint32_t win[12], out[8];
    const uint32_t got_o = qgemv::window<3>(buf + 16 + o, 32, win);
    ASSERT_EQ(got_o, static_cast<uint32_t>(o));
    qgemv::extract(win, got_o, out);
    for (int i = 0; i < 32; ++i)
      ASSERT_EQ(static_cast<uint8_t>(out[i / 4] >> (8 * (i % 4))), buf[16 + o + i])
          << "offset " << o;
  }
}

}  // namespace
}  // namespace sieve::cuda::test

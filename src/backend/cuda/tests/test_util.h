// Helpers for the CUDA tests: device detection (skip without a GPU), RAII device
// buffers, random paged-KV construction and element conversions. Host code only.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/fp16.h"

namespace sieve::cuda::test {

inline bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SIEVE_REQUIRE_GPU()                                                         \
  do {                                                                              \
    if (!::sieve::cuda::test::have_device())                                        \
      GTEST_SKIP() << "no CUDA device: CUDA kernels are compiled but not run here"; \
  } while (0)

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    cudaError_t e_ = (expr);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

#define STATUS_OK(expr)                                    \
  do {                                                     \
    auto s_ = (expr);                                      \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.message(); \
  } while (0)

template <class T>
struct dbuf {
  T* p = nullptr;
  size_t n = 0;
  dbuf() = default;
  explicit dbuf(size_t count) { alloc(count); }
  explicit dbuf(const std::vector<T>& h) {
    alloc(h.size());
    if (!h.empty()) cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  dbuf(dbuf&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  dbuf& operator=(dbuf&& o) noexcept {
    if (this != &o) {
      release();
      p = o.p;
      n = o.n;
      o.p = nullptr;
      o.n = 0;
    }
    return *this;
  }
  ~dbuf() { release(); }
  void release() {
    if (p) cudaFree(p);
    p = nullptr;
  }
  void alloc(size_t count) {
    release();
    n = count;
    cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, count) * sizeof(T));
  }
  // Poison with a byte pattern so unwritten outputs show (0xff.. is NaN for floats).
  void poison(int byte = 0xff) { cudaMemset(p, byte, std::max<size_t>(1, n) * sizeof(T)); }
  void zero() { cudaMemset(p, 0, std::max<size_t>(1, n) * sizeof(T)); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

// 16-bit element <-> float on the host, for bf16 or f16 storage.
inline uint16_t to_half_bits(float x, dtype t) {
  return t == dtype::bf16 ? f32_to_bf16(x) : f32_to_fp16(x);
}
inline float from_half_bits(uint16_t h, dtype t) {
  return t == dtype::bf16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

// fp8 e4m3 (OCP, finite-only: 0x7f/0xff are NaN) decode.
inline float fp8_e4m3_to_f32(uint8_t v) {
  const int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
  float r;
  if (e == 0)
    r = std::ldexp(static_cast<float>(m), -9);
  else
    r = std::ldexp(1.f + m / 8.f, e - 7);
  return s ? -r : r;
}

// Random values that are exactly representable in the 16-bit type.
inline std::vector<uint16_t> random_half(size_t n, dtype t, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_half_bits(nd(rng), t);
  return v;
}

// A paged KV cache with pages in shuffled physical order.
struct paged_cache {
  int batch = 0, page_size = 0, n_kv = 0, D = 0, n_pages = 0;
  dtype type = dtype::bf16;
  std::vector<int32_t> lens, indptr, indices, last;
  std::vector<uint16_t> k, v;  // [n_pages, page_size, n_kv, D]
  dbuf<int32_t> d_indptr, d_indices, d_last, d_lens;
  dbuf<uint16_t> d_k, d_v;

  void build(const std::vector<int32_t>& seq_lens, int ps, int kv_heads, int head_dim, dtype t,
             std::mt19937& rng, int spare_pages = 3) {
    lens = seq_lens;
    batch = static_cast<int>(lens.size());
    page_size = ps;
    n_kv = kv_heads;
    D = head_dim;
    type = t;
    indptr.assign(1, 0);
    last.clear();
    int total = 0;
    for (int L : lens) {
      const int np = (L + ps - 1) / ps;
      total += np;
      indptr.push_back(total);
      last.push_back(np == 0 ? 0 : L - (np - 1) * ps);
    }
    n_pages = total + spare_pages;
    std::vector<int32_t> perm(n_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    indices.assign(perm.begin(), perm.begin() + total);
    const size_t elems = static_cast<size_t>(n_pages) * ps * n_kv * D;
    k = random_half(elems, t, rng);
    v = random_half(elems, t, rng);
    upload();
  }
  void upload() {
    d_indptr = dbuf<int32_t>(indptr);
    d_indices = dbuf<int32_t>(indices);
    d_last = dbuf<int32_t>(last);
    d_lens = dbuf<int32_t>(lens);
    d_k = dbuf<uint16_t>(k);
    d_v = dbuf<uint16_t>(v);
  }
  // host float of K/V element (sequence b, token t, head g, dim d)
  size_t off(int b, int t, int g, int d) const {
    const int page = indices[indptr[b] + t / page_size];
    return ((static_cast<size_t>(page) * page_size + t % page_size) * n_kv + g) * D + d;
  }
  float kf(int b, int t, int g, int d) const { return from_half_bits(k[off(b, t, g, d)], type); }
  float vf(int b, int t, int g, int d) const { return from_half_bits(v[off(b, t, g, d)], type); }
  page_table table() const {
    page_table pt;
    pt.indptr = d_indptr.p;
    pt.indices = d_indices.p;
    pt.last_page_len = d_last.p;
    pt.batch = batch;
    pt.page_size = page_size;
    return pt;
  }
  paged_kv view() const {
    paged_kv kv;
    kv.k = d_k.p;
    kv.v = d_v.p;
    kv.pages = table();
    kv.n_kv_heads = n_kv;
    kv.head_dim = D;
    kv.type = type;
    return kv;
  }
};

// ||a - b|| / ||b||
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline uint32_t float_key_host(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Selection budgets: top-k, and top-p with its floor and cap, over positions [lo, len - tail).
inline select_budget topk(int k, int lo = 0, int tail = 0) {
  select_budget b;
  b.k_max = k;
  b.lo = lo;
  b.tail = tail;
  return b;
}
inline select_budget topp(float p, int k_max, int k_min, int lo = 0, int tail = 0) {
  select_budget b;
  b.k_max = k_max;
  b.k_min = k_min;
  b.top_p = p;
  b.lo = lo;
  b.tail = tail;
  return b;
}

// Top-k reference over s[lo, hi) (score descending, ties to the lower position), ascending.
inline std::vector<int> ref_topk(const float* s, int lo, int hi, int k) {
  std::vector<int> o;
  for (int t = lo; t < hi; ++t) o.push_back(t);
  std::stable_sort(o.begin(), o.end(),
                   [&](int a, int b) { return float_key_host(s[a]) > float_key_host(s[b]); });
  o.resize(std::min<size_t>(o.size(), static_cast<size_t>(std::max(k, 0))));
  std::sort(o.begin(), o.end());
  return o;
}

}  // namespace sieve::cuda::test

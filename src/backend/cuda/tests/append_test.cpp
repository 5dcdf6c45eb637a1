// KV append (+ sketch keys in bf16 / fp8 / int8) and the query sketch projection against
// CPU references.
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

void run_append(int n_kv, int D, int n_sk, int ds, dtype kt, dtype st, float sk_scale,
                uint32_t seed) {
  std::mt19937 rng(seed);
  const int ps = 16, n_pages = 9, n_new = 37;
  const size_t page_elems = static_cast<size_t>(ps) * n_kv * D;
  std::vector<uint16_t> k0 = random_half(n_pages * page_elems, kt, rng),
                        v0 = random_half(n_pages * page_elems, kt, rng);
  std::vector<uint16_t> kn = random_half(static_cast<size_t>(n_new) * n_kv * D, kt, rng);
  std::vector<uint16_t> vn = random_half(static_cast<size_t>(n_new) * n_kv * D, kt, rng);
  std::vector<int64_t> slots(n_pages * ps);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(n_new);
  const int r = n_kv / n_sk;
  std::vector<float> proj(static_cast<size_t>(n_sk) * r * D * ds);
  std::normal_distribution<float> nd(0.f, 1.f / std::sqrt(static_cast<float>(r * D)));
  for (auto& x : proj) x = nd(rng);
  const int esz = st == dtype::bf16 ? 2 : 1;
  const size_t sk_elems = static_cast<size_t>(n_pages) * n_sk * ps * ds;

  dbuf<uint16_t> dk(k0), dv(v0), dkn(kn), dvn(vn);
  dbuf<int64_t> dslot(slots);
  dbuf<float> dproj(proj);
  dbuf<uint8_t> dsk(sk_elems * esz);
  dsk.zero();
  kv_append_params p;
  p.k = dk.p;
  p.v = dv.p;
  p.k_new = dkn.p;
  p.v_new = dvn.p;
  p.slot = dslot.p;
  p.n_new = n_new;
  p.n_kv_heads = n_kv;
  p.head_dim = D;
  p.page_size = ps;
  p.type = kt;
  p.sk_keys = dsk.p;
  p.sk_type = st;
  p.sk_scale = sk_scale;
  p.n_sk_heads = n_sk;
  p.sk_dim = ds;
  p.proj = dproj.p;
  STATUS_OK(kv_append(p, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> k1 = dk.get(), v1 = dv.get();
  std::vector<uint8_t> sk = dsk.get();

  std::vector<uint16_t> kw = k0, vw = v0;
  const size_t row = static_cast<size_t>(n_kv) * D;
  for (int i = 0; i < n_new; ++i)
    for (size_t e = 0; e < row; ++e) {
      kw[slots[i] * row + e] = kn[i * row + e];
      vw[slots[i] * row + e] = vn[i * row + e];
    }
  ASSERT_EQ(k1, kw);
  ASSERT_EQ(v1, vw);
  for (int i = 0; i < n_new; ++i) {
    const int64_t page = slots[i] / ps, off = slots[i] % ps;
    for (int s = 0; s < n_sk; ++s)
      for (int j = 0; j < ds; ++j) {
        double acc = 0;
        for (int e = 0; e < r * D; ++e)
          acc += static_cast<double>(from_half_bits(kn[i * row + s * r * D + e], kt)) *
                 proj[(static_cast<size_t>(s) * r * D + e) * ds + j];
        const size_t idx = ((page * n_sk + s) * ps + off) * ds + j;
        float got;
        double tol;
        if (st == dtype::bf16) {
          uint16_t h;
          std::memcpy(&h, &sk[2 * idx], 2);
          got = bf16_to_f32(h) * sk_scale;
          tol = 1e-2 * std::fabs(acc) + 1e-4;
        } else if (st == dtype::fp8_e4m3) {
          got = fp8_e4m3_to_f32(sk[idx]) * sk_scale;
          tol = 0.07 * std::fabs(acc) + 0.01 * sk_scale;
        } else {
          got = static_cast<int8_t>(sk[idx]) * sk_scale;
          tol = 0.51 * sk_scale + 1e-5;
        }
        ASSERT_NEAR(got, acc, tol) << "token " << i << " head " << s << " dim " << j;
      }
  }
}

TEST(CudaAppend, Bf16SketchPerKvHead) {
  SIEVE_REQUIRE_GPU();
  run_append(8, 128, 8, 16, dtype::bf16, dtype::bf16, 1.f, 51);
}
TEST(CudaAppend, Fp8SharedSketch) {
  SIEVE_REQUIRE_GPU();
  run_append(8, 128, 1, 16, dtype::bf16, dtype::fp8_e4m3, 0.25f, 52);
}
TEST(CudaAppend, Int8SketchF16Head64) {
  SIEVE_REQUIRE_GPU();
  run_append(3, 64, 3, 32, dtype::f16, dtype::int8, 0.05f, 53);
}

TEST(CudaSketchQuery, MeanAndProjection) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(54);
  const int B = 2, n_q = 8, n_kv = 4, D = 64, n_sk = 2, ds = 16;
  const std::vector<int32_t> indptr = {0, 5, 8};
  const int n_tok = indptr.back();
  std::vector<uint16_t> q = random_half(static_cast<size_t>(n_tok) * n_q * D, dtype::bf16, rng);
  const int r = n_kv / n_sk, G = n_q / n_kv, n_sq = r * G;
  std::vector<float> proj(static_cast<size_t>(n_sk) * r * D * ds);
  std::normal_distribution<float> nd(0.f, 0.2f);
  for (auto& x : proj) x = nd(rng);
  dbuf<uint16_t> dq(q), dmean(static_cast<size_t>(B) * n_q * D);
  dbuf<int32_t> dind(indptr);
  dbuf<float> dproj(proj), dout(static_cast<size_t>(B) * n_sk * n_sq * ds);
  dout.poison();
  sketch_query_params p;
  p.q = dq.p;
  p.type = dtype::bf16;
  p.qo_indptr = dind.p;
  p.batch = B;
  p.n_q_heads = n_q;
  p.n_kv_heads = n_kv;
  p.head_dim = D;
  p.n_sk_heads = n_sk;
  p.sk_dim = ds;
  p.proj = dproj.p;
  p.q_out = dout.p;
  p.q_mean = dmean.p;
  STATUS_OK(sketch_query(p, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = dout.get();
  const std::vector<uint16_t> mean = dmean.get();
  std::vector<double> got, want, got_m, want_m;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < n_q; ++h) {
      std::vector<double> m(D, 0.0);
      for (int t = indptr[b]; t < indptr[b + 1]; ++t)
        for (int d = 0; d < D; ++d)
          m[d] += bf16_to_f32(q[(static_cast<size_t>(t) * n_q + h) * D + d]);
      for (int d = 0; d < D; ++d) {
        m[d] /= indptr[b + 1] - indptr[b];
        want_m.push_back(m[d]);
        got_m.push_back(bf16_to_f32(mean[(static_cast<size_t>(b) * n_q + h) * D + d]));
      }
      const int g = h / G, s = g / r, j = h - s * r * G;
      for (int e = 0; e < ds; ++e) {
        double acc = 0;
        for (int d = 0; d < D; ++d)
          acc += m[d] * proj[(static_cast<size_t>(s) * r * D + (g - s * r) * D + d) * ds + e];
        want.push_back(acc);
        got.push_back(out[((static_cast<size_t>(b) * n_sk + s) * n_sq + j) * ds + e]);
      }
    }
  EXPECT_LT(rel_err(got, want), 1e-5);
  EXPECT_LT(rel_err(got_m, want_m), 5e-3);
}

}  // namespace
}  // namespace sieve::cuda::test

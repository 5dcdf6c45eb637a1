// Top-k / top-p selection against a CPU reference: selections are compared as ordered
// lists (ascending positions) with the defined tie-break (lower position wins ties).
#include "backend/cuda/tests/real_rows.h"
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

enum class dist { uniform, softvote, ties, equal, signed_normal, real };

std::vector<float> make_scores(dist d, int n, std::mt19937& rng) {
  std::vector<float> v(n);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::normal_distribution<float> nd(0.f, 1.f);
  switch (d) {
    case dist::uniform:
      for (auto& x : v) x = u(rng);
      break;
    case dist::softvote: {  // sum of 4 softmaxes of Gaussian logits (sd 2.5) + a few sinks
      std::vector<double> acc(n, 0.0);
      for (int h = 0; h < 4; ++h) {
        std::vector<double> l(n);
        double mx = -1e300, s = 0;
        for (int i = 0; i < n; ++i) mx = std::max(mx, l[i] = 2.5 * nd(rng) + (i < 4 ? 12.0 : 0.0));
        for (int i = 0; i < n; ++i) s += (l[i] = std::exp(l[i] - mx));
        for (int i = 0; i < n; ++i) acc[i] += l[i] / s;
      }
      for (int i = 0; i < n; ++i) v[i] = static_cast<float>(acc[i]);
      break;
    }
    case dist::ties:
      for (auto& x : v) x = 0.125f * std::uniform_int_distribution<int>(1, 6)(rng);
      break;
    case dist::equal:
      for (auto& x : v) x = 0.5f;
      break;
    case dist::signed_normal:
      for (auto& x : v) x = 3.f * nd(rng);
      break;
    case dist::real: {  // a captured SmolLM2 attention row, tiled from a random offset
      static const std::vector<real_row> rows = load_real_rows(k_real_rows_fixture);
      if (rows.empty()) {
        ADD_FAILURE() << "missing or malformed fixture " << k_real_rows_fixture;
        break;
      }
      const size_t which = rng();
      v = tile_real_row(rows, which, n, rng() % rows[which % rows.size()].p.size());
      break;
    }
  }
  return v;
}

struct row_ref {
  std::vector<int> order;  // positions in [lo, hi) by (score desc, position asc)
  int r = 0;               // reference count
  double total = 0;
};

row_ref reference(const float* s, int lo, int hi, const select_budget& bu) {
  row_ref rr;
  for (int t = lo; t < hi; ++t) rr.order.push_back(t);
  std::stable_sort(rr.order.begin(), rr.order.end(),
                   [&](int a, int b) { return float_key_host(s[a]) > float_key_host(s[b]); });
  const int n = static_cast<int>(rr.order.size());
  for (int t : rr.order) rr.total += s[t];
  const int k_max = std::min(bu.k_max, n);
  int r = k_max;
  if (bu.top_p < 1.f) {
    double cum = 0;
    int rp = n;
    for (int i = 0; i < n; ++i) {
      cum += s[rr.order[i]];
      if (cum >= bu.top_p * rr.total) {
        rp = i + 1;
        break;
      }
    }
    r = std::min(k_max, std::max(std::min(bu.k_min, k_max), rp));
  }
  rr.r = r;
  return rr;
}

struct select_case {
  dist d;
  std::vector<int32_t> lens;  // one row per sequence (rows_per_seq 1) unless rows_per_seq > 1
  int rows_per_seq = 1;
  select_budget budget;
};

void run_select(const select_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int n_seq = static_cast<int>(c.lens.size());
  const int n_rows = n_seq * c.rows_per_seq;
  const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
  const int64_t stride = score_row_stride(max_len);
  std::vector<float> scores(static_cast<size_t>(n_rows) * stride,
                            std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < n_rows; ++r) {
    const int len = c.lens[r / c.rows_per_seq];
    std::vector<float> v = make_scores(c.d, len, rng);
    std::copy(v.begin(), v.end(), scores.begin() + static_cast<size_t>(r) * stride);
  }
  const int out_stride = std::max(1, c.budget.k_max);
  dbuf<float> d_s(scores);
  dbuf<int32_t> d_len(c.lens), d_out(static_cast<size_t>(n_rows) * out_stride), d_cnt(n_rows);
  dbuf<uint8_t> ws(select_ws_bytes(n_rows, max_len));
  ws.poison(0x5a);  // the chain must not rely on a clean workspace

  select_params p;
  p.scores = d_s.p;
  p.score_stride = stride;
  p.seq_len = d_len.p;
  p.rows_per_seq = c.rows_per_seq;
  p.n_rows = n_rows;
  p.budget = c.budget;
  p.ws.base = ws.p;
  p.ws.n_rows = n_rows;
  p.ws.max_tiles = select_max_tiles(max_len);
  p.out_idx = d_out.p;
  p.out_stride = out_stride;
  p.out_count = d_cnt.p;

  for (int rep = 0; rep < 2; ++rep) {  // twice: workspace state left by a run is harmless
    d_out.poison();
    d_cnt.poison();
    STATUS_OK(select(p, false, launch_cfg{}));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int32_t> out = d_out.get(), cnt = d_cnt.get();
    for (int r = 0; r < n_rows; ++r) {
      const int len = c.lens[r / c.rows_per_seq];
      const int lo = std::max(c.budget.lo, 0), hi = std::max(len - c.budget.tail, lo);
      const float* s = scores.data() + static_cast<size_t>(r) * stride;
      const row_ref rr = reference(s, std::min(lo, len), std::min(hi, len), c.budget);
      const int got_n = cnt[r];
      if (c.budget.top_p >= 1.f) {
        ASSERT_EQ(got_n, rr.r) << "row " << r;
      } else {
        // float mass sums on the GPU may move the boundary among near-equal masses
        ASSERT_GE(got_n, 0);
        ASSERT_LE(got_n, std::min<int>(c.budget.k_max, static_cast<int>(rr.order.size())));
        ASSERT_LE(std::abs(got_n - rr.r), 2 + rr.r / 1000) << "row " << r;
      }
      std::vector<int> want(rr.order.begin(),
                            rr.order.begin() + std::min<int>(got_n, rr.order.size()));
      std::sort(want.begin(), want.end());
      std::vector<int> got(out.begin() + static_cast<size_t>(r) * out_stride,
                           out.begin() + static_cast<size_t>(r) * out_stride + got_n);
      ASSERT_EQ(got, want) << "row " << r << " len " << len << " n " << got_n;
    }
  }
}

TEST(CudaSelect, TopkUniformManyRowsAwkwardLengths) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::uniform, {1, 97, 4096, 4097, 70001, 300001}, 1, topk(2048, 3, 5)}, 11);
}
TEST(CudaSelect, TopkSoftVoteLike) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::softvote, {131072, 50000, 9999}, 2, topk(2048, 128, 513)}, 12);
}
TEST(CudaSelect, TopkTiesBrokenByPosition) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::ties, {100000, 33333, 17}, 1, topk(5000)}, 13);
}
TEST(CudaSelect, TopkAllEqual) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::equal, {65536, 1000}, 1, topk(777)}, 14);
}
TEST(CudaSelect, TopkSignedScoresAndTinyBudgets) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::signed_normal, {20000, 5}, 3, topk(1)}, 15);
  run_select({dist::signed_normal, {20000, 5}, 1, topk(0)}, 16);
}
TEST(CudaSelect, TopkBudgetLargerThanRange) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::uniform, {3000, 2500}, 1, topk(4096, 10, 10)}, 17);
}
TEST(CudaSelect, TopkTwoMillionScores) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::softvote, {2097152}, 2, topk(2048)}, 18);
}
TEST(CudaSelect, ToppSoftVoteLike) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::softvote, {131072, 40000}, 2, topp(0.9f, 65536, 16)}, 19);
}
TEST(CudaSelect, ToppUniformWithFloorAndCap) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::uniform, {100000, 3000}, 1, topp(0.5f, 20000, 100)}, 20);
  run_select({dist::uniform, {100000}, 1, topp(0.99f, 5000, 100)}, 21);
}
TEST(CudaSelect, ToppTies) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::ties, {50000}, 1, topp(0.3f, 50000, 0)}, 22);
}

// Real score distributions: attention rows captured from SmolLM2 (tiled to the length).
TEST(CudaSelect, TopkRealAttentionRows) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::real, {131072, 30000, 1500}, 8, topk(2048, 128, 513)}, 23);
}
TEST(CudaSelect, ToppRealAttentionRows) {
  SIEVE_REQUIRE_GPU();
  run_select({dist::real, {131072, 20000}, 4, topp(0.9f, 131072, 16)}, 24);
  run_select({dist::real, {65536}, 2, topp(0.5f, 4096, 128, 4, 64)}, 25);
}

TEST(CudaSelect, RejectsSmallOutput) {
  select_params p;
  p.budget.k_max = 10;
  p.out_stride = 5;
  EXPECT_FALSE(select(p, false, launch_cfg{}).ok());
}

}  // namespace
}  // namespace sieve::cuda::test

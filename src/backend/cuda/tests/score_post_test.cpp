// score_fold (rows summed, scaled, max-pooled over the selectable range) and clear_selection
// against a host reference, and the select chain's skip (a selection-cache hit leaves the
// row alone). The fold adds the same floats in the same order as the reference (row 0 first)
// and pooling is a max, so the comparison is exact.
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

// out[o][t] = mul * sum_r in[o*fold + r][t]; then t in [lo, hi) takes the max over
// [t - w/2, t - w/2 + w) clipped to [lo, hi) (sparse/select.cpp max_pool_scores on the range).
std::vector<float> ref_fold(const std::vector<float>& in, int64_t stride, int n_in, int fold,
                            float mul, int pool, int len, int lo, int hi) {
  const int n_out = n_in / fold;
  std::vector<float> sum(static_cast<size_t>(n_out) * len), out(sum.size());
  for (int o = 0; o < n_out; ++o) {
    for (int t = 0; t < len; ++t) {
      float s = 0.f;
      for (int r = 0; r < fold; ++r) s += in[(static_cast<int64_t>(o) * fold + r) * stride + t];
      sum[static_cast<size_t>(o) * len + t] = s * mul;
    }
    for (int t = 0; t < len; ++t) {
      float v = sum[static_cast<size_t>(o) * len + t];
      if (pool > 1 && t >= lo && t < hi) {
        const int a = std::max(lo, t - pool / 2), b = std::min(hi, t - pool / 2 + pool);
        v = sum[static_cast<size_t>(o) * len + a];
        for (int j = a + 1; j < b; ++j) v = std::max(v, sum[static_cast<size_t>(o) * len + j]);
      }
      out[static_cast<size_t>(o) * len + t] = v;
    }
  }
  return out;
}

TEST(CudaScoreFold, MatchesTheHostReference) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(40);
  std::normal_distribution<float> nd(0.f, 1.f);
  struct Case {
    int len, n_in, fold, pool, lo, tail;
    float mul;
  };
  const Case cases[] = {
      {97, 3, 3, 0, 16, 10, 1.f},
      {1000, 3, 1, 5, 16, 65, 1.f},
      {5000, 24, 24, 4, 128, 513, 0.6931472f},
      {4500, 6, 2, 32, 0, 0, 1.f},
      {300, 2, 1, 7, 200, 150, 2.f},  // an empty selectable range: no pooling
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "len " << c.len << " rows " << c.n_in << " fold " << c.fold
                                    << " pool " << c.pool);
    const int max_len = c.len + 100;
    const int64_t stride = score_row_stride(max_len);
    std::vector<float> in(static_cast<size_t>(c.n_in) * stride);
    for (auto& x : in) x = nd(rng);
    dbuf<float> d_in(in);
    const int n_out = c.n_in / c.fold;
    dbuf<float> d_out(static_cast<size_t>(n_out) * stride);
    d_out.poison();
    dbuf<int32_t> d_len(std::vector<int32_t>{c.len});
    score_fold_params p;
    p.in = d_in.p;
    p.in_stride = stride;
    p.n_in = c.n_in;
    p.fold = c.fold;
    p.mul = c.mul;
    p.pool = c.pool;
    p.out = d_out.p;
    p.out_stride = stride;
    p.seq_len = d_len.p;
    p.lo = c.lo;
    p.tail = c.tail;
    p.max_len = max_len;
    STATUS_OK(score_fold(p, launch_cfg{nullptr, false}));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = d_out.get();
    const int hi = std::max(c.lo, c.len - c.tail);
    const std::vector<float> want =
        ref_fold(in, stride, c.n_in, c.fold, c.mul, c.pool, c.len, c.lo, hi);
    int bad = 0;
    for (int o = 0; o < n_out; ++o)
      for (int t = 0; t < c.len; ++t)
        bad += got[static_cast<size_t>(o) * stride + t] != want[static_cast<size_t>(o) * c.len + t];
    EXPECT_EQ(bad, 0);
  }
}

TEST(CudaScoreFold, SkipAndClearSelection) {
  SIEVE_REQUIRE_GPU();
  const int64_t stride = score_row_stride(64);
  dbuf<float> d_in(std::vector<float>(stride, 1.f));
  dbuf<float> d_out(stride);
  d_out.poison();
  dbuf<int32_t> d_len(std::vector<int32_t>{64});
  dbuf<int32_t> d_skip(std::vector<int32_t>{1});
  score_fold_params p;
  p.in = d_in.p;
  p.in_stride = stride;
  p.n_in = 1;
  p.out = d_out.p;
  p.out_stride = stride;
  p.seq_len = d_len.p;
  p.max_len = 64;
  p.skip = d_skip.p;
  STATUS_OK(score_fold(p, launch_cfg{nullptr, false}));
  // clear_selection: kept under skip, zeroed without
  dbuf<int32_t> d_cnt(std::vector<int32_t>{7, 9});
  STATUS_OK(clear_selection(d_cnt.p, d_skip.p, launch_cfg{nullptr, false}));
  STATUS_OK(clear_selection(d_cnt.p + 1, nullptr, launch_cfg{nullptr, false}));
  // select with skip set writes nothing
  dbuf<uint8_t> ws(select_ws_bytes(1, 64));
  dbuf<int32_t> idx(8), cnt(1);
  idx.poison();
  cnt.poison();
  select_params sp;
  sp.scores = d_in.p;
  sp.score_stride = stride;
  sp.seq_len = d_len.p;
  sp.n_rows = 1;
  sp.budget.k_max = 8;
  sp.ws = {ws.p, 1, select_max_tiles(64)};
  sp.out_idx = idx.p;
  sp.out_stride = 8;
  sp.out_count = cnt.p;
  sp.skip = d_skip.p;
  STATUS_OK(select(sp, false, launch_cfg{nullptr, false}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = d_out.get();
  EXPECT_TRUE(std::isnan(out[0]));  // poisoned, not written
  EXPECT_EQ(d_cnt.get(), (std::vector<int32_t>{7, 0}));
  EXPECT_EQ(cnt.get()[0], -1);
  // and without skip it selects
  sp.skip = nullptr;
  STATUS_OK(select(sp, false, launch_cfg{nullptr, false}));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(cnt.get()[0], 8);
}

// Hard vote: 4 heads in 2 rows, random picks inside [lo, hi); out = votes + soft x tie over the
// range (the CPU's formula, rounded the same way), untouched outside it, votes back to zero.
TEST(CudaHardVote, CountsEachHeadsPicks) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(41);
  const int len = 1000, lo = 16, tail = 65, hi = len - tail, k = 100, H = 4, per = 2;
  const int64_t stride = score_row_stride(len);
  std::vector<int32_t> idx(static_cast<size_t>(H) * k), cnt(H, k);
  for (int h = 0; h < H; ++h) {
    std::vector<int32_t> all(hi - lo);
    std::iota(all.begin(), all.end(), lo);
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + k);
    std::copy(all.begin(), all.begin() + k, idx.begin() + h * k);
  }
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> soft(static_cast<size_t>(H / per) * stride);
  for (auto& x : soft) x = u(rng);
  dbuf<int32_t> d_idx(idx), d_cnt(cnt), d_len(std::vector<int32_t>{len});
  dbuf<float> d_soft(soft);
  dbuf<int32_t> votes(static_cast<size_t>(H / per) * stride);
  votes.zero();
  hard_vote_params p;
  p.idx = d_idx.p;
  p.idx_stride = k;
  p.count = d_cnt.p;
  p.n_heads = H;
  p.heads_per_row = per;
  p.soft = d_soft.p;
  p.votes = votes.p;
  p.out = d_soft.p;  // in place, as the runner runs it
  p.stride = stride;
  p.tie = 1.0f / (per + 1);
  p.seq_len = d_len.p;
  p.lo = lo;
  p.tail = tail;
  STATUS_OK(hard_vote(p, len, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = d_soft.get();
  const std::vector<int32_t> left = votes.get();
  int bad = 0;
  for (int o = 0; o < H / per; ++o) {
    std::vector<int> v(len, 0);
    for (int h = o * per; h < (o + 1) * per; ++h)
      for (int i = 0; i < k; ++i) ++v[idx[h * k + i]];
    for (int t = 0; t < len; ++t) {
      const float s = soft[o * stride + t];
      const float want = t >= lo && t < hi ? static_cast<float>(v[t]) + s * p.tie : s;
      bad += got[o * stride + t] != want;
      bad += left[o * stride + t] != 0;
    }
  }
  EXPECT_EQ(bad, 0);
}

// Block sums over the range from lo (the last block partial), and the token lists of picked
// blocks (the last one cut at the range's end), exactly.
TEST(CudaBlockPick, SumsAndTokenLists) {
  SIEVE_REQUIRE_GPU();
  std::mt19937 rng(43);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int len = 1000, lo = 16, tail = 65, hi = len - tail, B = 24, rows = 2;
  const int nb = (hi - lo + B - 1) / B;  // 39 blocks, the last of 7 tokens
  const int64_t stride = score_row_stride(len);
  std::vector<float> sc(static_cast<size_t>(rows) * stride);
  for (auto& x : sc) x = u(rng);
  dbuf<float> d_sc(sc), d_blk(static_cast<size_t>(rows) * stride);
  dbuf<int32_t> d_len(std::vector<int32_t>{len}), d_nb(1);
  d_nb.poison();
  block_pick_params p;
  p.scores = d_sc.p;
  p.block_scores = d_blk.p;
  p.stride = stride;
  p.n_blocks = d_nb.p;
  p.n_rows = rows;
  p.seq_len = d_len.p;
  p.lo = lo;
  p.tail = tail;
  p.block = B;
  p.max_len = len;
  STATUS_OK(block_sums(p, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(d_nb.get()[0], nb);
  const std::vector<float> bs = d_blk.get();
  int bad = 0;
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < nb; ++b) {
      float s = 0.f;
      for (int t = lo + b * B; t < std::min(hi, lo + (b + 1) * B); ++t) s += sc[r * stride + t];
      bad += bs[r * stride + b] != s;
    }
  }
  EXPECT_EQ(bad, 0);
  // row 0 picks blocks 0, 5 and the short last one; row 1 picks none
  const std::vector<int32_t> picks = {0, 5, nb - 1, 0, 0, 0};
  dbuf<int32_t> d_picks(picks), d_cnt(std::vector<int32_t>{3, 0});
  dbuf<int32_t> out(static_cast<size_t>(rows) * 3 * B), out_cnt(rows);
  out.poison();
  p.blk_idx = d_picks.p;
  p.blk_stride = 3;
  p.blk_count = d_cnt.p;
  p.max_blocks = 3;
  p.out_idx = out.p;
  p.out_stride = 3 * B;
  p.out_count = out_cnt.p;
  STATUS_OK(block_expand(p, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> want;
  for (int b : {0, 5, nb - 1})
    for (int t = lo + b * B; t < std::min(hi, lo + (b + 1) * B); ++t) want.push_back(t);
  const std::vector<int32_t> o = out.get(), c = out_cnt.get();
  ASSERT_EQ(c[0], static_cast<int>(want.size()));
  EXPECT_EQ(std::vector<int32_t>(o.begin(), o.begin() + c[0]), want);
  EXPECT_EQ(c[1], 0);
}

TEST(CudaScoreFold, RejectsBadArguments) {
  SIEVE_REQUIRE_GPU();
  score_fold_params p;
  EXPECT_FALSE(score_fold(p, launch_cfg{}).ok());
  dbuf<float> b(64);
  dbuf<int32_t> len(1);
  p.in = b.p;
  p.out = b.p;
  p.seq_len = len.p;
  p.n_in = 3;
  p.fold = 2;
  p.max_len = 16;
  p.in_stride = p.out_stride = 16;
  EXPECT_FALSE(score_fold(p, launch_cfg{}).ok());  // fold does not divide n_in
  p.fold = 1;
  p.pool = 5000;
  EXPECT_FALSE(score_fold(p, launch_cfg{}).ok());
  EXPECT_FALSE(clear_selection(nullptr, nullptr, launch_cfg{}).ok());
}

}  // namespace
}  // namespace sieve::cuda::test

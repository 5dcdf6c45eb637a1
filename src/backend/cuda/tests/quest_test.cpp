// Quest's block bounds (quest_score) against a float64 host reference over the same bf16 keys
// and query, and the picked blocks' token list (quest_expand) exactly, with blocks that are
// not pages, partial blocks at both ends of the range and a range shorter than a block.
// Bounds sum d products per head in another order than the reference: relative error 1e-5.
#include "backend/cuda/tests/test_util.h"

namespace sieve::cuda::test {
namespace {

struct Range {
  int c0, pick_end, b0, b1;
};
Range range_of(int len, int n_q, int sinks, int local, int B) {
  Range r;
  const int n_prefix = std::max(len - n_q, 0);
  r.c0 = std::min(sinks, n_prefix);
  r.pick_end = std::max(r.c0, n_prefix - local);
  r.b0 = (r.c0 + B - 1) / B;
  r.b1 = r.pick_end / B;
  return r;
}

void run_quest(int len, int ps, int n_q_heads, int n_kv, int D, int B, int sinks, int local,
               int n_q, uint32_t seed) {
  std::mt19937 rng(seed);
  paged_cache kv;
  kv.build({len}, ps, n_kv, D, dtype::bf16, rng);
  const int G = n_q_heads / n_kv;
  const std::vector<uint16_t> q = random_half(static_cast<size_t>(n_q_heads) * D, dtype::bf16, rng);
  dbuf<uint16_t> d_q(q);
  const int64_t stride = score_row_stride(len);
  dbuf<float> scores(static_cast<size_t>(n_kv) * stride);
  scores.poison();
  dbuf<int32_t> nblk(1);
  nblk.poison();
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  quest_params p;
  p.kv = kv.view();
  p.q = d_q.p;
  p.n_q_heads = n_q_heads;
  p.scale = scale;
  p.block = B;
  p.sinks = sinks;
  p.local = local;
  p.n_queries = n_q;
  p.scores = scores.p;
  p.score_stride = stride;
  p.n_blocks = nblk.p;
  STATUS_OK(quest_score(p, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const Range r = range_of(len, n_q, sinks, local, B);
  EXPECT_EQ(nblk.get()[0], r.b1);
  const std::vector<float> sc = scores.get();
  std::vector<double> got, want;
  for (int g = 0; g < n_kv; ++g) {
    for (int bi = r.b0; bi < r.b1; ++bi) {
      double s = 0;
      for (int h = g * G; h < (g + 1) * G; ++h) {
        double bound = 0;
        for (int d = 0; d < D; ++d) {
          double mn = INFINITY, mx = -INFINITY;
          for (int t = bi * B; t < (bi + 1) * B; ++t) {
            mn = std::min<double>(mn, kv.kf(0, t, g, d));
            mx = std::max<double>(mx, kv.kf(0, t, g, d));
          }
          const double qd = from_half_bits(q[static_cast<size_t>(h) * D + d], dtype::bf16);
          bound += std::max(qd * mn, qd * mx);
        }
        s += scale * bound;
      }
      want.push_back(s);
      got.push_back(sc[static_cast<size_t>(g) * stride + bi]);
    }
  }
  if (!want.empty()) {
    EXPECT_LT(rel_err(got, want), 1e-5);
  }

  // expand: every other block of the range picked (row 0), none (row 1)
  std::vector<int32_t> blk(16 * 2, 0), cnt = {0, 0};
  for (int bi = r.b0; bi < r.b1 && cnt[0] < 16; bi += 2) blk[cnt[0]++] = bi;
  dbuf<int32_t> d_blk(blk), d_cnt(cnt), d_len(std::vector<int32_t>{len});
  const int out_stride = (16 + 2) * B;
  dbuf<int32_t> out(static_cast<size_t>(2) * out_stride), out_cnt(2);
  out.poison();
  quest_expand_params x;
  x.blk_idx = d_blk.p;
  x.blk_stride = 16;
  x.blk_count = d_cnt.p;
  x.max_blocks = 16;
  x.n_rows = 2;
  x.seq_len = d_len.p;
  x.block = B;
  x.sinks = sinks;
  x.local = local;
  x.n_queries = n_q;
  x.out_idx = out.p;
  x.out_stride = out_stride;
  x.out_count = out_cnt.p;
  STATUS_OK(quest_expand(x, launch_cfg{}));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int32_t> o = out.get(), oc = out_cnt.get();
  for (int row = 0; row < 2; ++row) {
    std::vector<int32_t> want_list;  // forward_sparse.cpp's quest list
    for (int j = r.c0; j < std::min(r.pick_end, r.b0 * B); ++j) want_list.push_back(j);
    for (int i = 0; i < cnt[row]; ++i)
      for (int j = blk[row * 16 + i] * B; j < (blk[row * 16 + i] + 1) * B; ++j)
        want_list.push_back(j);
    for (int j = std::max(r.b0, r.b1) * B; j < r.pick_end; ++j) want_list.push_back(j);
    ASSERT_EQ(oc[row], static_cast<int>(want_list.size())) << "row " << row;
    EXPECT_EQ(
        std::vector<int32_t>(o.begin() + row * out_stride, o.begin() + row * out_stride + oc[row]),
        want_list)
        << "row " << row;
  }
}

TEST(CudaQuest, BlocksOfAPage) {
  SIEVE_REQUIRE_GPU();
  run_quest(2000, 16, 9, 3, 64, 16, 16, 64, 1, 50);
}
TEST(CudaQuest, BlocksAcrossPagesWithPartialEnds) {
  SIEVE_REQUIRE_GPU();
  run_quest(3001, 16, 32, 8, 128, 24, 20, 70, 37, 51);
}
TEST(CudaQuest, Head256AndARangeShorterThanABlock) {
  SIEVE_REQUIRE_GPU();
  run_quest(1500, 12, 8, 1, 256, 32, 128, 512, 1, 52);
  run_quest(120, 16, 8, 2, 128, 64, 30, 40, 1, 53);  // range [30, 79): no complete block
}
TEST(CudaQuest, RejectsBadArguments) {
  SIEVE_REQUIRE_GPU();
  EXPECT_FALSE(quest_score(quest_params{}, launch_cfg{}).ok());
  quest_expand_params x;
  EXPECT_FALSE(quest_expand(x, launch_cfg{}).ok());
}

}  // namespace
}  // namespace sieve::cuda::test

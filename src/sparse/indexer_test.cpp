// The indexer fit on synthetic problems with a known answer: keys in a low-dim subspace
// make the full attention exactly representable at d_idx = that dimension.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sparse/indexer.h"

namespace sieve {
namespace {

// n_keys keys k = A z (z in R^r), n_heads query heads with their own queries; target =
// softmax(s q.k) over a causal prefix of each query.
IndexerGroupData subspace_problem(int32_t D, int32_t r, int32_t n_heads, int32_t n_keys,
                                  int32_t n_q, float s, uint32_t seed, float noise = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> A(static_cast<size_t>(D) * r);
  for (float& x : A) x = nd(rng);
  IndexerGroupData data;
  data.head_dim = D;
  data.n_heads = n_heads;
  IndexerSeq S;
  S.n_keys = n_keys;
  S.keys.resize(static_cast<size_t>(n_keys) * D);
  for (int32_t j = 0; j < n_keys; ++j) {
    std::vector<float> z(r);
    for (float& x : z) x = 2.0f * nd(rng);
    for (int32_t i = 0; i < D; ++i) {
      float acc = noise * nd(rng);
      for (int32_t c = 0; c < r; ++c) acc += A[static_cast<size_t>(i) * r + c] * z[c];
      S.keys[static_cast<size_t>(j) * D + i] = acc;
    }
  }
  S.n_q = n_q;
  S.queries.resize(static_cast<size_t>(n_heads) * n_q * D);
  for (float& x : S.queries) x = nd(rng);
  for (int32_t i = 0; i < n_q; ++i) {
    S.q_len.push_back(n_keys / 2 + (n_keys / 2) * i / n_q);
    S.held_out.push_back(i % 4 == 3);
  }
  int64_t total = 0;
  for (int32_t n : S.q_len) total += n;
  S.target.resize(static_cast<size_t>(n_heads) * total);
  for (int32_t a = 0; a < n_heads; ++a) {
    int64_t off = a * total;
    for (int32_t i = 0; i < n_q; ++i) {
      const float* q = S.queries.data() + (static_cast<int64_t>(a) * n_q + i) * D;
      const int32_t n = S.q_len[i];
      double m = -1e300, sum = 0;
      std::vector<double> l(n);
      for (int32_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int32_t c = 0; c < D; ++c)
          acc += double{q[c]} * S.keys[static_cast<size_t>(j) * D + c];
        l[j] = s * acc;
        m = std::max(m, l[j]);
      }
      for (double& x : l) sum += x = std::exp(x - m);
      for (int32_t j = 0; j < n; ++j) S.target[off + j] = static_cast<float>(l[j] / sum);
      off += n;
    }
  }
  data.seqs.push_back(std::move(S));
  return data;
}

TEST(Indexer, EigenDecompositionReconstructs) {
  const int32_t n = 7;
  std::mt19937 rng(2);
  std::normal_distribution<double> nd;
  std::vector<double> m(n * n);
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t j = 0; j <= i; ++j) m[i * n + j] = m[j * n + i] = nd(rng);
  }
  std::vector<double> val, vec;
  symmetric_eigen(m, n, val, vec);
  for (int32_t i = 1; i < n; ++i) EXPECT_GE(val[i - 1], val[i]);
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int32_t c = 0; c < n; ++c) acc += vec[i * n + c] * val[c] * vec[j * n + c];
      EXPECT_NEAR(acc, m[i * n + j], 1e-9);
    }
  }
}

TEST(Indexer, FitReachesNearZeroKlOnALowRankProblem) {
  const int32_t D = 32, r = 4;
  const IndexerGroupData data = subspace_problem(D, r, 2, 384, 96, 0.25f, 7);
  ThreadPool pool(2);
  IndexerFitOptions o;
  o.d_idx = r;
  o.steps = 400;
  o.lr = 0.05f;
  o.scale = 0.25f;
  o.recall_k = 8;
  o.recall_of = 32;
  const IndexerGroupFit fit = fit_indexer(data, o, pool);
  ASSERT_EQ(fit.heads.size(), 2u);
  EXPECT_EQ(fit.d_idx, r);
  EXPECT_EQ(fit.w_k.size(), static_cast<size_t>(D * r));

  IndexerFitOptions ro = o;
  ro.init = IndexerInit::random;
  std::vector<float> wk;
  std::vector<std::vector<float>> wq;
  indexer_init(data, ro, r, wk, wq);
  const IndexerEval rnd = evaluate_indexer(data, ro, r, wk, wq, true, pool);
  for (int32_t a = 0; a < 2; ++a) {
    const IndexerHeadFit& h = fit.heads[a];
    EXPECT_LT(h.kl_fit, 0.05) << "head " << a;
    EXPECT_LT(h.kl_fit, 0.1 * rnd.kl[a]) << "head " << a;
    EXPECT_LT(h.kl_fit, h.kl_init) << "head " << a;
    EXPECT_GT(h.recall_fit, 0.9) << "head " << a;
    EXPECT_GE(h.recall_fit, rnd.recall[a]) << "head " << a;
  }
}

TEST(Indexer, FitFromRandomInitAlsoLearns) {
  const IndexerGroupData data = subspace_problem(16, 2, 1, 256, 64, 0.3f, 11, 0.05f);
  ThreadPool pool(1);
  IndexerFitOptions o;
  o.d_idx = 2;
  o.steps = 400;
  o.lr = 0.05f;
  o.scale = 0.3f;
  o.init = IndexerInit::random;
  const IndexerGroupFit fit = fit_indexer(data, o, pool);
  EXPECT_LT(fit.heads[0].kl_fit, 0.25 * fit.heads[0].kl_init);
  EXPECT_LT(fit.heads[0].train_kl_fit, fit.heads[0].train_kl_init);
}

// An exact indexer (W = identity at d_idx = head_dim, no RoPE in the synthetic data) keeps
// exactly the attention's own top-p set: keep == oracle, coverage >= p. A gain above 1 keeps
// fewer candidates and less mass; a gain below 1 more.
TEST(Indexer, BudgetOfAnExactIndexerIsTheAttentionsOwn) {
  const int32_t D = 8;
  const IndexerGroupData data = subspace_problem(D, D, 2, 400, 64, 0.5f, 3);
  ThreadPool pool(2);
  IndexerFitOptions o;
  o.scale = 0.5f;
  o.budget_p = 0.9f;
  o.budget_sinks = 4;
  o.budget_window = 32;
  o.budget_min_keep = 0;
  std::vector<float> eye(D * D, 0.0f);
  for (int32_t i = 0; i < D; ++i) eye[i * D + i] = 1.0f;
  const std::vector<std::vector<float>> wq(2, eye);
  const IndexerBudget b1 = indexer_budget(data, o, D, eye, wq, 1.0f, true, pool);
  const IndexerBudget b4 = indexer_budget(data, o, D, eye, wq, 4.0f, true, pool);
  const IndexerBudget bh = indexer_budget(data, o, D, eye, wq, 0.5f, true, pool);
  for (int32_t a = 0; a < 2; ++a) {
    EXPECT_GT(b1.oracle[a], 0.0) << a;
    EXPECT_LT(b1.oracle[a], 1.0) << a;
    EXPECT_NEAR(b1.keep[a], b1.oracle[a], 1e-3) << a;
    EXPECT_GE(b1.coverage[a], 0.9 - 1e-4) << a;
    EXPECT_LT(b4.keep[a], b1.keep[a]) << a;
    EXPECT_LT(b4.coverage[a], b1.coverage[a]) << a;
    EXPECT_GT(bh.keep[a], b1.keep[a]) << a;
    EXPECT_EQ(b4.oracle[a], b1.oracle[a]) << a;  // the attention's own set does not move
  }
}

TEST(Indexer, DeterministicAcrossPoolSizes) {
  const IndexerGroupData data = subspace_problem(16, 3, 2, 200, 40, 0.3f, 5, 0.1f);
  IndexerFitOptions o;
  o.d_idx = 2;
  o.steps = 30;
  ThreadPool p1(1), p2(2);
  const IndexerGroupFit a = fit_indexer(data, o, p1), b = fit_indexer(data, o, p2);
  EXPECT_EQ(a.w_k, b.w_k);
  EXPECT_EQ(a.heads[1].w_q, b.heads[1].w_q);
  EXPECT_EQ(a.heads[0].kl_fit, b.heads[0].kl_fit);
}

}  // namespace
}  // namespace sieve

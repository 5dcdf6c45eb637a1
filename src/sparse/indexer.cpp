#include "sparse/indexer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>

#include "core/assert.h"
#include "sparse/topp.h"

namespace sieve {
namespace {

// Work is split into this many fixed blocks of (sequence, head, query) items, each with its
// own gradient accumulators, reduced in block order: results do not depend on the pool size.
constexpr int kBlocks = 8;

struct Item {
  int32_t seq, head, q;
  int64_t t_off;  // start of the target row in seq.target
};

std::vector<Item> make_items(const IndexerGroupData& d, bool held_out) {
  std::vector<Item> items;
  for (int32_t s = 0; s < static_cast<int32_t>(d.seqs.size()); ++s) {
    const IndexerSeq& S = d.seqs[s];
    int64_t total = 0;
    for (int32_t i = 0; i < S.n_q; ++i) total += S.q_len[i];
    for (int32_t a = 0; a < d.n_heads; ++a) {
      int64_t off = a * total;
      for (int32_t i = 0; i < S.n_q; ++i) {
        if ((S.held_out[i] != 0) == held_out) items.push_back({s, a, i, off});
        off += S.q_len[i];
      }
    }
  }
  return items;
}

float scale_of(const IndexerFitOptions& o, int32_t head_dim) {
  return o.scale > 0 ? o.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

// out[n, d] = x[n, D] W[D, d]
void project_rows(const float* x, int64_t n, int32_t D, const float* w, int32_t d, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    float* o = out + r * d;
    std::fill(o, o + d, 0.0f);
    const float* xr = x + r * D;
    for (int32_t i = 0; i < D; ++i) {
      const float xi = xr[i];
      const float* wi = w + int64_t{i} * d;
      for (int32_t c = 0; c < d; ++c) o[c] += xi * wi[c];
    }
  }
}

// z[j] = s * qt . kt_j for j < n; returns log-sum-exp of z.
double indexer_logits(const float* qt, const float* kt, int32_t n, int32_t d, float s, float* z) {
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j < n; ++j) {
    const float* k = kt + int64_t{j} * d;
    float acc = 0;
    for (int32_t c = 0; c < d; ++c) acc += qt[c] * k[c];
    z[j] = s * acc;
    m = std::max(m, z[j]);
  }
  double sum = 0;
  for (int32_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(z[j] - m));
  return m + std::log(sum);
}

double kl_of(const float* p, const float* z, double lse, int32_t n) {
  double kl = 0;
  for (int32_t j = 0; j < n; ++j) {
    if (p[j] > 0) kl += p[j] * (std::log(static_cast<double>(p[j])) - (z[j] - lse));
  }
  return std::max(kl, 0.0);
}

double recall_of(const float* p, const float* z, int32_t n, int32_t k, int32_t of, TopPScratch& sc,
                 std::vector<int32_t>& a, std::vector<int32_t>& b) {
  k = std::min(k, n);
  if (k <= 0) return 1.0;
  emit_cut(p, n, top_k_cut(p, n, k, sc), a);
  emit_cut(z, n, top_k_cut(z, n, std::min(of, n), sc), b);
  int32_t hit = 0;
  size_t ib = 0;
  for (int32_t j : a) {  // both ascending
    while (ib < b.size() && b[ib] < j) ++ib;
    hit += ib < b.size() && b[ib] == j;
  }
  return static_cast<double>(hit) / k;
}

// Projected keys of every sequence: [n_keys, d] each.
void project_keys(const IndexerGroupData& data, const std::vector<float>& w_k, int32_t d,
                  std::vector<std::vector<float>>& kt, ThreadPool& pool) {
  kt.resize(data.seqs.size());
  for (size_t s = 0; s < data.seqs.size(); ++s) {
    const IndexerSeq& S = data.seqs[s];
    kt[s].resize(static_cast<size_t>(S.n_keys) * d);
    pool.parallel_for(S.n_keys, 64, [&](int64_t a, int64_t z) {
      project_rows(S.keys.data() + a * data.head_dim, z - a, data.head_dim, w_k.data(), d,
                   kt[s].data() + a * d);
    });
  }
}

}  // namespace

void symmetric_eigen(std::vector<double> a, int32_t n, std::vector<double>& values,
                     std::vector<double>& vecs) {
  std::vector<double> v(static_cast<size_t>(n) * n, 0.0);
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i) * n + i] = 1.0;
  auto A = [&](int32_t i, int32_t j) -> double& { return a[static_cast<size_t>(i) * n + j]; };
  for (int sweep = 0; sweep < 50; ++sweep) {
    double off = 0, diag = 0;
    for (int32_t i = 0; i < n; ++i) {
      diag += A(i, i) * A(i, i);
      for (int32_t j = i + 1; j < n; ++j) off += A(i, j) * A(i, j);
    }
    if (off <= 1e-22 * std::max(diag, 1e-300)) break;
    for (int32_t p = 0; p < n; ++p) {
      for (int32_t q = p + 1; q < n; ++q) {
        const double apq = A(p, q);
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (A(q, q) - A(p, p)) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int32_t k = 0; k < n; ++k) {  // A <- A J (columns p, q)
          const double akp = A(k, p), akq = A(k, q);
          A(k, p) = c * akp - s * akq;
          A(k, q) = s * akp + c * akq;
        }
        for (int32_t k = 0; k < n; ++k) {  // A <- J^T A (rows p, q)
          const double apk = A(p, k), aqk = A(q, k);
          A(p, k) = c * apk - s * aqk;
          A(q, k) = s * apk + c * aqk;
        }
        for (int32_t k = 0; k < n; ++k) {
          double& vkp = v[static_cast<size_t>(k) * n + p];
          double& vkq = v[static_cast<size_t>(k) * n + q];
          const double x = vkp, y = vkq;
          vkp = c * x - s * y;
          vkq = s * x + c * y;
        }
      }
    }
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return A(x, x) > A(y, y); });
  values.resize(n);
  vecs.assign(static_cast<size_t>(n) * n, 0.0);
  for (int32_t c = 0; c < n; ++c) {
    values[c] = A(order[c], order[c]);
    for (int32_t r = 0; r < n; ++r)
      vecs[static_cast<size_t>(r) * n + c] = v[static_cast<size_t>(r) * n + order[c]];
  }
}

void indexer_init(const IndexerGroupData& data, const IndexerFitOptions& o, int32_t d,
                  std::vector<float>& w_k, std::vector<std::vector<float>>& w_q) {
  const int32_t D = data.head_dim;
  w_k.assign(static_cast<size_t>(D) * d, 0.0f);
  w_q.assign(data.n_heads, std::vector<float>(static_cast<size_t>(D) * d, 0.0f));
  if (o.init == IndexerInit::random) {
    std::mt19937_64 rng(o.seed);
    std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(static_cast<float>(d)));
    for (float& x : w_k) x = nd(rng);
    for (auto& w : w_q) w = w_k;
    return;
  }
  // The logit spread a query sees over keys is q^T C_k q (C_k: the keys' covariance): the
  // directions worth keeping carry both key variance and query energy. Take the top
  // eigenvectors of B = (C_k S_q + S_q C_k) / 2 (S_q: the queries' second moment), the
  // symmetrised product; W_Q = W_K = those orthonormal columns.
  std::vector<double> mean(D, 0.0), ck(static_cast<size_t>(D) * D, 0.0), sq(ck.size(), 0.0);
  int64_t nk = 0, nq = 0;
  for (const IndexerSeq& S : data.seqs) {
    for (int32_t j = 0; j < S.n_keys; ++j) {
      for (int32_t i = 0; i < D; ++i) mean[i] += S.keys[int64_t{j} * D + i];
    }
    nk += S.n_keys;
  }
  for (double& m : mean) m /= std::max<int64_t>(nk, 1);
  std::vector<double> x(D);
  for (const IndexerSeq& S : data.seqs) {
    for (int32_t j = 0; j < S.n_keys; ++j) {
      for (int32_t i = 0; i < D; ++i) x[i] = S.keys[int64_t{j} * D + i] - mean[i];
      for (int32_t r = 0; r < D; ++r) {
        for (int32_t c = 0; c < D; ++c) ck[static_cast<size_t>(r) * D + c] += x[r] * x[c];
      }
    }
    for (int64_t i = 0; i < int64_t{data.n_heads} * S.n_q; ++i) {
      if (S.held_out[i % S.n_q]) continue;
      const float* q = S.queries.data() + i * D;
      for (int32_t r = 0; r < D; ++r) {
        for (int32_t c = 0; c < D; ++c) sq[static_cast<size_t>(r) * D + c] += double{q[r]} * q[c];
      }
      ++nq;
    }
  }
  for (double& v : ck) v /= std::max<int64_t>(nk, 1);
  for (double& v : sq) v /= std::max<int64_t>(nq, 1);
  std::vector<double> b(ck.size(), 0.0);
  for (int32_t r = 0; r < D; ++r) {
    for (int32_t c = 0; c < D; ++c) {
      double acc = 0;
      for (int32_t k = 0; k < D; ++k) {
        acc += ck[static_cast<size_t>(r) * D + k] * sq[static_cast<size_t>(k) * D + c] +
               sq[static_cast<size_t>(r) * D + k] * ck[static_cast<size_t>(k) * D + c];
      }
      b[static_cast<size_t>(r) * D + c] = acc / 2;
    }
  }
  std::vector<double> values, vecs;
  symmetric_eigen(std::move(b), D, values, vecs);
  for (int32_t r = 0; r < D; ++r) {
    for (int32_t c = 0; c < d; ++c)
      w_k[static_cast<size_t>(r) * d + c] =
          static_cast<float>(vecs[static_cast<size_t>(r) * D + c]);
  }
  for (auto& w : w_q) w = w_k;
}

namespace {

// Per-head means of K metrics of the indexer over the queries with held_out == want_held_out.
// For each (sequence, head, query) item, metric(item, seq, logits, scratch, out) fills out[0..K)
// and returns false to leave the item out; logits() computes the indexer logits over the
// query's keys (z, scaled) and returns their log-sum-exp. Items run on the pool, each thread
// with its own Scratch; sums are taken in item order, so the means do not depend on the pool.
// A head with no item reads 0.
template <int K, class Scratch, class Metric>
std::array<std::vector<double>, K> per_head_means(const IndexerGroupData& data,
                                                  const IndexerFitOptions& o, int32_t d,
                                                  const std::vector<float>& w_k,
                                                  const std::vector<std::vector<float>>& w_q,
                                                  bool want_held_out, ThreadPool& pool,
                                                  Metric metric) {
  const int32_t D = data.head_dim;
  const float s = scale_of(o, D);
  std::vector<std::vector<float>> kt;
  project_keys(data, w_k, d, kt, pool);
  const std::vector<Item> items = make_items(data, want_held_out);
  std::vector<std::array<double, K>> vals(items.size());
  std::vector<char> used(items.size(), 0);
  pool.run([&](int th, int n_th) {
    std::vector<float> z, qt(d);
    Scratch scratch;
    for (size_t it = items.size() * th / n_th; it < items.size() * (th + 1) / n_th; ++it) {
      const Item& I = items[it];
      const IndexerSeq& S = data.seqs[I.seq];
      auto logits = [&]() -> std::pair<const float*, double> {
        const int32_t n = S.q_len[I.q];
        z.resize(n);
        project_rows(S.queries.data() + (int64_t{I.head} * S.n_q + I.q) * D, 1, D,
                     w_q[I.head].data(), d, qt.data());
        const double lse = indexer_logits(qt.data(), kt[I.seq].data(), n, d, s, z.data());
        return {z.data(), lse};
      };
      used[it] = metric(I, S, logits, scratch, vals[it]) ? 1 : 0;
    }
  });
  std::array<std::vector<double>, K> mean;
  for (auto& m : mean) m.assign(data.n_heads, 0.0);
  std::vector<int64_t> cnt(data.n_heads, 0);
  for (size_t it = 0; it < items.size(); ++it) {
    if (!used[it]) continue;
    const int32_t a = items[it].head;
    cnt[a]++;
    for (int k = 0; k < K; ++k) mean[k][a] += vals[it][k];
  }
  for (int32_t a = 0; a < data.n_heads; ++a) {
    if (cnt[a] == 0) continue;
    for (int k = 0; k < K; ++k) mean[k][a] /= cnt[a];
  }
  return mean;
}

}  // namespace

IndexerEval evaluate_indexer(const IndexerGroupData& data, const IndexerFitOptions& o, int32_t d,
                             const std::vector<float>& w_k,
                             const std::vector<std::vector<float>>& w_q, bool want_held_out,
                             ThreadPool& pool) {
  struct Scratch {
    std::vector<int32_t> a, b;
    TopPScratch sc;
  };
  auto m = per_head_means<2, Scratch>(data, o, d, w_k, w_q, want_held_out, pool,
                                      [&](const Item& I, const IndexerSeq& S, auto& logits,
                                          Scratch& x, std::array<double, 2>& out) {
                                        const int32_t n = S.q_len[I.q];
                                        const auto [z, lse] = logits();
                                        const float* p = S.target.data() + I.t_off;
                                        out[0] = kl_of(p, z, lse, n);
                                        out[1] = recall_of(p, z, n, o.recall_k, o.recall_of, x.sc,
                                                           x.a, x.b);
                                        return true;
                                      });
  return IndexerEval{std::move(m[0]), std::move(m[1])};
}

IndexerBudget indexer_budget(const IndexerGroupData& data, const IndexerFitOptions& o, int32_t d,
                             const std::vector<float>& w_k,
                             const std::vector<std::vector<float>>& w_q, float gain,
                             bool want_held_out, ThreadPool& pool) {
  SIEVE_ASSERT(o.budget_p > 0);
  const TopPParams tp{o.budget_p, o.budget_min_keep, 0};
  struct Scratch {
    std::vector<int32_t> sel;
    TopPScratch sc;
  };
  // keep, coverage, oracle keep; a query with fewer than 64 candidates is left out.
  auto m = per_head_means<3, Scratch>(
      data, o, d, w_k, w_q, want_held_out, pool,
      [&](const Item& I, const IndexerSeq& S, auto& logits, Scratch& x,
          std::array<double, 3>& out) {
        const int32_t n = S.q_len[I.q];
        const int32_t c0 = std::min(o.budget_sinks, n), c1 = std::max(c0, n - o.budget_window);
        const int32_t m = c1 - c0;
        if (m < 64) return false;
        const float* z = logits().first;
        const float* p = S.target.data() + I.t_off + c0;
        double total = 0;
        for (int32_t j = 0; j < m; ++j) total += p[j];
        top_p_select_logits(z + c0, m, gain, tp, x.sel, x.sc);
        double held = 0;
        for (int32_t j : x.sel) held += p[j];
        out[0] = static_cast<double>(x.sel.size()) / m;
        out[1] = total > 0 ? held / total : 1.0;
        out[2] = static_cast<double>(top_p_cut(p, m, tp, x.sc).count) / m;
        return true;
      });
  return IndexerBudget{std::move(m[0]), std::move(m[1]), std::move(m[2])};
}

IndexerGroupFit fit_indexer(const IndexerGroupData& data, const IndexerFitOptions& o,
                            ThreadPool& pool) {
  const int32_t D = data.head_dim, H = data.n_heads;
  SIEVE_ASSERT(D > 0 && H > 0);
  const int32_t d = std::clamp(o.d_idx > 0 ? o.d_idx : std::max(1, D / 8), 1, D);
  const float s = scale_of(o, D);
  const size_t wsz = static_cast<size_t>(D) * d;

  IndexerGroupFit fit;
  fit.d_idx = d;
  std::vector<std::vector<float>> w_q;
  indexer_init(data, o, d, fit.w_k, w_q);
  const IndexerEval ev0 = evaluate_indexer(data, o, d, fit.w_k, w_q, true, pool);
  const IndexerEval tr0 = evaluate_indexer(data, o, d, fit.w_k, w_q, false, pool);

  const std::vector<Item> items = make_items(data, false);
  const double inv_items =
      items.empty() ? 0.0 : static_cast<double>(H) / static_cast<double>(items.size());
  // Per block: dW_Q per head and per sequence the key-side accumulator U [n_keys, d].
  struct BlockAcc {
    std::vector<std::vector<double>> gq;  // [H][D * d]
    std::vector<std::vector<float>> u;    // [n_seq][n_keys * d]
  };
  std::vector<BlockAcc> acc(kBlocks);
  for (BlockAcc& B : acc) {
    B.gq.assign(H, std::vector<double>(wsz));
    B.u.resize(data.seqs.size());
    for (size_t si = 0; si < data.seqs.size(); ++si)
      B.u[si].resize(static_cast<size_t>(data.seqs[si].n_keys) * d);
  }
  // Adam state over [W_K, W_Q[0], ..., W_Q[H-1]].
  const size_t n_par = wsz * (1 + H);
  std::vector<double> m1(n_par, 0.0), m2(n_par, 0.0), grad(n_par, 0.0);
  std::vector<std::vector<float>> kt;

  for (int32_t step = 0; step < o.steps && !items.empty(); ++step) {
    project_keys(data, fit.w_k, d, kt, pool);
    pool.parallel_for(kBlocks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> z, qt(d), r(d);
      for (int64_t b = b0; b < b1; ++b) {
        BlockAcc& B = acc[b];
        for (auto& g : B.gq) std::fill(g.begin(), g.end(), 0.0);
        for (auto& u : B.u) std::fill(u.begin(), u.end(), 0.0f);
        for (size_t it = items.size() * b / kBlocks; it < items.size() * (b + 1) / kBlocks; ++it) {
          const Item& I = items[it];
          const IndexerSeq& S = data.seqs[I.seq];
          const int32_t n = S.q_len[I.q];
          const float* q = S.queries.data() + (int64_t{I.head} * S.n_q + I.q) * D;
          const float* p = S.target.data() + I.t_off;
          const float* k_t = kt[I.seq].data();
          z.resize(n);
          project_rows(q, 1, D, w_q[I.head].data(), d, qt.data());
          const double lse = indexer_logits(qt.data(), k_t, n, d, s, z.data());
          std::fill(r.begin(), r.end(), 0.0f);
          float* u = B.u[I.seq].data();
          for (int32_t j = 0; j < n; ++j) {
            const float g = s * (static_cast<float>(std::exp(z[j] - lse)) - p[j]);
            if (g == 0.0f) continue;
            const float* kj = k_t + int64_t{j} * d;
            float* uj = u + int64_t{j} * d;
            for (int32_t c = 0; c < d; ++c) {
              r[c] += g * kj[c];
              uj[c] += g * qt[c];
            }
          }
          double* gq = B.gq[I.head].data();
          for (int32_t i = 0; i < D; ++i) {
            for (int32_t c = 0; c < d; ++c) gq[int64_t{i} * d + c] += double{q[i]} * r[c];
          }
        }
      }
    });
    // Reduce in block order; dW_K = sum_seq K^T U.
    std::fill(grad.begin(), grad.end(), 0.0);
    for (int32_t a = 0; a < H; ++a) {
      double* g = grad.data() + wsz * (1 + a);
      for (const BlockAcc& B : acc) {
        for (size_t i = 0; i < wsz; ++i) g[i] += B.gq[a][i];
      }
    }
    for (size_t si = 0; si < data.seqs.size(); ++si) {
      const IndexerSeq& S = data.seqs[si];
      std::vector<float> u(static_cast<size_t>(S.n_keys) * d, 0.0f);
      for (const BlockAcc& B : acc) {
        for (size_t i = 0; i < u.size(); ++i) u[i] += B.u[si][i];
      }
      // Rows of dW_K split over threads: each row i sums over keys in key order.
      pool.parallel_for(D, 4, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          double* g = grad.data() + i * d;
          for (int32_t j = 0; j < S.n_keys; ++j) {
            const double kij = S.keys[int64_t{j} * D + i];
            const float* uj = u.data() + int64_t{j} * d;
            for (int32_t c = 0; c < d; ++c) g[c] += kij * uj[c];
          }
        }
      });
    }
    const double lr =
        o.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * step / std::max(1, o.steps))));
    const double b1 = 0.9, b2 = 0.999, t = step + 1;
    const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < n_par; ++i) {
      const double g = grad[i] * inv_items;
      m1[i] = b1 * m1[i] + (1 - b1) * g;
      m2[i] = b2 * m2[i] + (1 - b2) * g * g;
      const double delta = lr * (m1[i] / c1) / (std::sqrt(m2[i] / c2) + 1e-8);
      float& w = i < wsz ? fit.w_k[i] : w_q[(i - wsz) / wsz][(i - wsz) % wsz];
      w -= static_cast<float>(delta);
    }
  }

  const IndexerEval ev1 = evaluate_indexer(data, o, d, fit.w_k, w_q, true, pool);
  const IndexerEval tr1 = evaluate_indexer(data, o, d, fit.w_k, w_q, false, pool);

  IndexerBudget bud;
  if (o.budget_p > 0) bud = indexer_budget(data, o, d, fit.w_k, w_q, 1.0f, true, pool);

  fit.heads.resize(H);
  for (int32_t a = 0; a < H; ++a) {
    IndexerHeadFit& h = fit.heads[a];
    h.w_q = std::move(w_q[a]);
    h.kl_init = ev0.kl[a];
    h.kl_fit = ev1.kl[a];
    h.recall_init = ev0.recall[a];
    h.recall_fit = ev1.recall[a];
    h.train_kl_init = tr0.kl[a];
    h.train_kl_fit = tr1.kl[a];
    if (o.budget_p > 0) {
      h.keep = bud.keep[a];
      h.keep_oracle = bud.oracle[a];
      h.coverage = bud.coverage[a];
    }
  }
  return fit;
}

}  // namespace sieve

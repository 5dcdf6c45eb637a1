// RTPurbo's decode indexer, stage 1 (docs/calibrate.md): for the retrieval heads of one KV
// group, low-dim projections W_Q (per query head) and W_K (shared by the group) of PRE-RoPE
// q and k, fitted so that softmax_j(scale * (q W_Q).(k_j W_K)) matches the model's full
// attention: minimise the mean KL(full || indexer) over calibration queries, with Adam and
// the hand-derived gradient
//   z_j = s q~.k~_j,  q~ = q W_Q,  k~_j = k_j W_K,  g_j = dKL/dz_j = Q_j - P_j
//   dW_Q = s * q (sum_j g_j k~_j)^T          dW_K = s * sum_j k_j (g_j q~)^T.
// The engine can then keep k W_K per KV head as side data and score tokens with q W_Q.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace sieve {

enum class IndexerInit {
  pca,     // top-d_idx eigenvectors of the keys' covariance weighted by the queries' energy
  random,  // JL sketch: N(0, 1/d_idx) entries, W_Q = W_K (q~.k~ estimates q.k)
};

struct IndexerFitOptions {
  int32_t d_idx = 0;    // 0: head_dim / 8
  int32_t steps = 300;  // Adam steps (full batch over the training queries)
  float lr = 0.02f;     // Adam step size (cosine decay to a tenth)
  float scale = 0;  // logit scale s of the indexer (the model's attn_scale); 0: 1/sqrt(head_dim)
  int32_t recall_k = 64;    // recall: the full attention's top recall_k tokens ...
  int32_t recall_of = 256;  // ... found in the indexer's top recall_of
  uint64_t seed = 1;
  IndexerInit init = IndexerInit::pca;
  // The budget report after the fit (budget_p > 0, see indexer_budget): the candidates of a
  // query are its keys but the first budget_sinks and the last budget_window, as at decode.
  float budget_p = 0;
  int32_t budget_sinks = 4;
  int32_t budget_window = 0;
  int32_t budget_min_keep = 16;  // the policy's floor under top-p
};

// One calibration sequence of a KV group. Query i of head a attends to keys [0, q_len[i]).
struct IndexerSeq {
  int32_t n_keys = 0;
  std::vector<float> keys;  // [n_keys, head_dim] pre-RoPE keys of the KV head
  int32_t n_q = 0;
  std::vector<float> queries;     // [n_heads, n_q, head_dim] pre-RoPE queries
  std::vector<int32_t> q_len;     // [n_q] causal length of each query
  std::vector<uint8_t> held_out;  // [n_q] 1: evaluation only
  // [n_heads, sum(q_len)] the model's attention (post-RoPE, softmax of attn_scale * q.k);
  // query i of head a starts at a * sum(q_len) + sum(q_len[0..i)).
  std::vector<float> target;
};

struct IndexerGroupData {
  int32_t head_dim = 0;
  int32_t n_heads = 0;  // retrieval query heads of the group being fitted
  std::vector<IndexerSeq> seqs;
};

struct IndexerHeadFit {
  std::vector<float> w_q;          // [head_dim, d_idx]
  double kl_init = 0, kl_fit = 0;  // held-out mean KL(full || indexer), nats
  double recall_init = 0,
         recall_fit = 0;  // held-out recall of the full top recall_k in the indexer's top recall_of
  double train_kl_init = 0, train_kl_fit = 0;
  // The budget on held-out queries (budget_p > 0): shares of the candidates kept by the
  // indexer's top-p and by the full attention's own top-p, and the attention mass the
  // indexer's set holds.
  double keep = 0, keep_oracle = 0, coverage = 0;
};

struct IndexerGroupFit {
  int32_t d_idx = 0;
  std::vector<float> w_k;             // [head_dim, d_idx]
  std::vector<IndexerHeadFit> heads;  // [n_heads]
};

// The initial projections (exposed for tests and for a fit-free baseline).
void indexer_init(const IndexerGroupData& data, const IndexerFitOptions& o, int32_t d_idx,
                  std::vector<float>& w_k, std::vector<std::vector<float>>& w_q);

// Fits the group. Deterministic for the options and data (independent of the pool's size).
IndexerGroupFit fit_indexer(const IndexerGroupData& data, const IndexerFitOptions& o,
                            ThreadPool& pool);

// Mean KL(full || indexer) and recall over the queries with held_out == want_held_out, per
// head, for given projections.
struct IndexerEval {
  std::vector<double> kl, recall;  // [n_heads]
};
IndexerEval evaluate_indexer(const IndexerGroupData& data, const IndexerFitOptions& o,
                             int32_t d_idx, const std::vector<float>& w_k,
                             const std::vector<std::vector<float>>& w_q, bool want_held_out,
                             ThreadPool& pool);

// The indexer's top-p budget on the queries with held_out == want_held_out, per head, with its
// logits multiplied by `gain` (the rtpurbo knob rt_gain): the mean share of the candidate keys
// that top-budget_p over softmax(gain x indexer logits) keeps, the mean share of the full
// attention's candidate mass that set holds, and the mean share the full attention's own
// top-budget_p set needs. Queries with fewer than 64 candidates are left out (a head with none
// reads 0 everywhere).
struct IndexerBudget {
  std::vector<double> keep, coverage, oracle;  // [n_heads]
};
IndexerBudget indexer_budget(const IndexerGroupData& data, const IndexerFitOptions& o,
                             int32_t d_idx, const std::vector<float>& w_k,
                             const std::vector<std::vector<float>>& w_q, float gain,
                             bool want_held_out, ThreadPool& pool);

// Symmetric eigen-decomposition (cyclic Jacobi) of a [n, n] matrix: eigenvalues descending,
// eigenvectors as the columns of vecs ([n, n] row-major).
void symmetric_eigen(std::vector<double> a, int32_t n, std::vector<double>& values,
                     std::vector<double>& vecs);

}  // namespace sieve

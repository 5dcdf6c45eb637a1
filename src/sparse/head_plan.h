// RTPurbo's head plan (docs/calibrate.md): which query heads of each layer are retrieval
// heads (full attention; a low-dim indexer picks their tokens at decode) and which are local
// (sinks + window), with the calibration scores behind the choice and, once fitted, the
// indexer projections. Written by `sieve calibrate`, read by the engine (--head-plan).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace sieve {

// The attention shape a plan is made for (from ModelHParams; sparse does not depend on model).
struct HeadShape {
  int32_t n_layer = 0;
  int32_t n_head = 0;     // query heads per layer
  int32_t n_head_kv = 0;  // KV heads per layer; a KV group is n_head / n_head_kv query heads
  int32_t head_dim = 0;
  bool operator==(const HeadShape&) const = default;
};

// Fit quality of one query head's indexer on held-out calibration queries.
struct IndexerFit {
  double kl_init = 0, kl_fit = 0;  // KL(full || indexer attention), nats, mean
  double recall_init = 0,
         recall_fit = 0;  // top-`recall_k` of full attention inside the indexer's top-`recall_of`
  // The top-p budget on held-out calibration queries (0 when not measured): the shares of the
  // candidate keys kept by the indexer's top-p and by the full attention's own, and the
  // attention mass the indexer's set holds.
  double keep = 0, keep_oracle = 0, coverage = 0;
};

struct HeadPlan {
  HeadShape shape;
  std::vector<uint8_t> retrieval;  // [n_layer, n_head] 1: retrieval head, 0: local head
  std::vector<float> scores;       // [n_layer, n_head] calibration score (needle attention share)
  float ratio = 0;                 // share of query heads asked for as retrieval heads
  uint64_t seed = 0;
  std::string model_name, model_arch, model_sha256;  // provenance ("" if unknown)
  int32_t samples = 0, ctx = 0;                      // calibration run
  std::string score_method;                          // how scores were measured (free text)

  // Indexer (d_idx == 0: not fitted). Projections of PRE-RoPE vectors, row-major
  // [head_dim, d_idx]: q_idx = q W_Q (per query head), k_idx = k W_K (per KV head, shared by
  // the group's query heads); the indexer's logit of token j is q_idx . k_idx_j * attn scale.
  // Fitted only where needed: W_Q for retrieval heads, W_K for KV groups with one.
  int32_t d_idx = 0;
  std::vector<std::vector<float>> w_q;  // [n_layer * n_head] empty or [head_dim * d_idx]
  std::vector<std::vector<float>> w_k;  // [n_layer * n_head_kv] empty or [head_dim * d_idx]
  std::vector<IndexerFit> fit;          // [n_layer * n_head] (meaningful where w_q is set)
  int32_t recall_k = 0, recall_of = 0;  // the recall figure's sizes
  double fit_ms = 0;

  // An empty plan for a shape: every head local, no indexer.
  static HeadPlan empty(const HeadShape& shape);

  int32_t group_size() const { return shape.n_head / shape.n_head_kv; }
  bool is_retrieval(int32_t layer, int32_t head) const {
    return retrieval[static_cast<size_t>(layer) * shape.n_head + head] != 0;
  }
  float score(int32_t layer, int32_t head) const {
    return scores[static_cast<size_t>(layer) * shape.n_head + head];
  }
  // A KV group must keep full KV when any of its query heads is a retrieval head.
  bool kv_group_full(int32_t layer, int32_t kv_head) const;
  int32_t n_retrieval() const;
  int32_t n_retrieval(int32_t layer) const;
  double retrieval_share() const;  // n_retrieval / (n_layer * n_head)
  int32_t n_kv_full() const;       // KV groups (over all layers) that keep full KV

  bool has_indexer() const { return d_idx > 0; }
  // [head_dim, d_idx] row-major, or nullptr when that head has no fitted projection.
  const float* indexer_q(int32_t layer, int32_t head) const;
  const float* indexer_k(int32_t layer, int32_t kv_head) const;
};

// Structural checks: positive shape with n_head a multiple of n_head_kv, array sizes, 0/1
// masks, finite scores and weights, indexer sizes.
Status validate_head_plan(const HeadPlan& plan);
// The plan fits this model's attention shape (layer, head, KV head counts and head_dim).
Status check_head_plan_shape(const HeadPlan& plan, const HeadShape& model);

// JSON (docs/calibrate.md has the format). Parsing validates structure; errors name the
// offending field.
std::string head_plan_to_json(const HeadPlan& plan);
Result<HeadPlan> head_plan_from_json(std::string_view text);
// Reads and parses a file; with `model` non-null also checks the shape.
Result<HeadPlan> load_head_plan(const std::string& path, const HeadShape* model = nullptr);
Status save_head_plan(const HeadPlan& plan, const std::string& path);

// Marks the top round(ratio * n_layer * n_head) heads by score (at least one; ties to the
// lower (layer, head)) as retrieval heads.
void choose_retrieval_heads(HeadPlan& plan, float ratio);

}  // namespace sieve

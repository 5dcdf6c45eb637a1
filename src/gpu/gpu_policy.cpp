#include "gpu/gpu_policy.h"

#include "engine/sparse_seq.h"

namespace sieve {
namespace {

Error refuse(const PolicyConfig& p, std::string_view knob, std::string_view value,
             std::string_view runs) {
  return make_error(
      "policy '{}': {}={} does not run on the CUDA backend yet ({}); change the knob or use "
      "--backend cpu",
      p.preset, knob, value, runs);
}

}  // namespace

Result<GpuPolicy> gpu_policy_from(const PolicyConfig& p, const ModelHParams* hp) {
  // auto prefills densely here below 64K prompt tokens: the sparse chunk is slower than the
  // dense prefill kernel on the GPU there, and 1.7x faster at 128K (bench/RESULTS.md).
  GpuPolicy g;
  g.chunk_from = p.from_auto ? k_gpu_auto_chunk_from : 0;
  g.name = p.from_auto ? fmt::format("{} (dense prefill below {} prompt tokens)", p.describe(),
                                     g.chunk_from)
                       : p.describe();
  if (p.is_dense()) return g;
  constexpr std::string_view runs =
      "it runs scorer=exact, sketch or none with memory=keep and original positions";
  if (p.drops_prefill()) return refuse(p, "prefill", "uniprefill", runs);
  if (p.evicts())
    return refuse(p, "memory", p.memory == MemoryKind::evict_h2o ? "h2o" : "stca", runs);
  switch (p.scorer) {
    case ScorerKind::exact:
      g.scorer = GpuScorer::exact;
      break;
    case ScorerKind::none:
      g.scorer = GpuScorer::none;
      break;
    case ScorerKind::sketch:
      g.scorer = GpuScorer::sketch;
      break;
    case ScorerKind::quest:
      g.scorer = GpuScorer::quest;
      break;
    case ScorerKind::indexer:
      return refuse(p, "scorer", "indexer", runs);
    case ScorerKind::all:
      return refuse(p, "scorer", "all", runs);
  }
  const bool ranks = g.scorer != GpuScorer::none;
  const bool quest = g.scorer == GpuScorer::quest;  // (aggregation, top_p, pooling: not read)
  if (g.scorer == GpuScorer::sketch && p.aggregation == AggregationKind::hard_vote) {
    return refuse(p, "aggregation", "hard_vote",
                  "the sketch scorer writes no per-head logits; the exact scorer votes");
  }
  if (ranks && p.top_k <= 0) {
    return refuse(p, "top_k", fmt::format("{}", p.top_k),
                  "a selection row holds at most 8192 picks: give top_k (the cap under top_p)");
  }
  if (ranks && !quest && p.top_p > 0 && p.aggregation == AggregationKind::raw_sum) {
    return refuse(p, "aggregation", "raw_sum",
                  "top_p takes its mass share of soft votes; raw sums may be negative");
  }
  if (ranks && (p.block > 1 || quest) &&
      (int64_t{p.top_k} + p.block - 1) / p.block * p.block + (quest ? 2 * p.block : 0) >
          k_gpu_max_top_k) {
    return refuse(p, "top_k", fmt::format("{}", p.top_k),
                  fmt::format("a selection row holds {} tokens: the picked blocks of {}{} must fit",
                              k_gpu_max_top_k, p.block,
                              quest ? " and the two partial blocks at the range's ends" : ""));
  }
  if (p.positions == PositionMode::compact)
    return refuse(p, "positions", "compact", "original positions only");
  if (g.scorer == GpuScorer::exact && p.score_positions == ScorePositions::none) {
    return refuse(p, "score_positions", "none", "the scorer reads keys at their positions");
  }
  if (p.selection_cache && !quest && p.scope != VoteScope::layer) {
    return refuse(p, "scope", "group",
                  "the selection cache runs with scope=layer; add selection_cache=false");
  }
  if (hp && g.scorer == GpuScorer::sketch) {
    const SketchSpec sk = sketch_spec_for(p, *hp);
    if (sk.dim != 8 && sk.dim != 16 && sk.dim != 32) {
      return refuse(p, "sketch_dim", fmt::format("{}", sk.dim),
                    "the sketch kernels take 8, 16 or 32 dimensions");
    }
  }
  g.sparse = true;
  g.layer_vote = p.scope == VoteScope::layer;
  g.raw_sum = p.aggregation == AggregationKind::raw_sum && !quest;
  g.hard_vote = p.aggregation == AggregationKind::hard_vote && !quest;
  g.raw_logits = p.raw_logits;
  g.top_k = p.top_k;
  g.top_p = quest ? 0.f : p.top_p;
  g.min_keep = p.top_p > 0 && !quest ? p.min_keep : 0;
  g.pool = p.pool_kernel > 1 && !quest ? p.pool_kernel : 0;
  g.block = ranks ? std::max(p.block, 1) : 1;
  g.sinks = p.sinks;
  g.local = p.local;
  g.threshold = p.threshold();
  g.chunk_prefill = p.prefill == PrefillMode::chunk;
  g.prefill_tail = p.prefill_tail;
  g.compact_beyond_train = p.positions == PositionMode::auto_;
  g.selection_cache = p.selection_cache && !quest;  // the CPU's quest never reuses either
  g.theta = p.theta;
  return g;
}

Status gpu_check_length(const GpuPolicy& pol, const ModelHParams& hp, int64_t len) {
  // the CPU switches past n_ctx_max() (sparse_seq.cpp): with YaRN, the stretched context
  if (pol.sparse && pol.compact_beyond_train && len > hp.n_ctx_max()) {
    return make_error(
        "the sequence would reach {} tokens, past the {} the model was trained with: tokenselect "
        "switches to "
        "compact positions there (positions=auto), which the CUDA backend does not run; use --set "
        "positions=original to keep original positions on the GPU, or --backend cpu",
        len, hp.n_ctx_max());
  }
  return {};
}

}  // namespace sieve

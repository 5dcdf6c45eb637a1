#include "gpu/gpu_policy.h"

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

Result<GpuPolicy> gpu_policy_from(const PolicyConfig& p) {
  // auto prefills densely here below 64K prompt tokens: the sparse chunk is slower than the
  // dense prefill kernel on the GPU there, and 1.7x faster at 128K (bench/RESULTS.md).
  GpuPolicy g;
  g.chunk_from = p.from_auto ? k_gpu_auto_chunk_from : 0;
  g.name = p.from_auto ? fmt::format("{} (dense prefill below {} prompt tokens)", p.describe(),
                                     g.chunk_from)
                       : p.describe();
  if (p.is_dense()) return g;
  constexpr std::string_view runs = "it runs scorer=exact with the soft vote and a top_k budget";
  if (p.drops_prefill()) return refuse(p, "prefill", "uniprefill", runs);
  if (p.evicts())
    return refuse(p, "memory", p.memory == MemoryKind::evict_h2o ? "h2o" : "stca", runs);
  switch (p.scorer) {
    case ScorerKind::exact:
      break;
    case ScorerKind::none:
      return refuse(p, "scorer", "none", runs);
    case ScorerKind::sketch:
      return refuse(p, "scorer", "sketch", runs);
    case ScorerKind::quest:
      return refuse(p, "scorer", "quest", runs);
    case ScorerKind::indexer:
      return refuse(p, "scorer", "indexer", runs);
    case ScorerKind::all:
      return refuse(p, "scorer", "all", runs);
  }
  if (p.aggregation != AggregationKind::soft_vote) {
    return refuse(p, "aggregation",
                  p.aggregation == AggregationKind::hard_vote ? "hard_vote" : "raw_sum", runs);
  }
  if (p.top_p > 0) return refuse(p, "top_p", fmt::format("{}", p.top_p), runs);
  if (p.top_k <= 0) return refuse(p, "top_k", fmt::format("{}", p.top_k), runs);
  if (p.block != 1) return refuse(p, "block", fmt::format("{}", p.block), "token granularity only");
  if (p.pool_kernel > 1)
    return refuse(p, "pool_kernel", fmt::format("{}", p.pool_kernel), "no score pooling");
  if (p.raw_logits) return refuse(p, "raw_logits", "true", "scaled logits only");
  if (p.positions == PositionMode::compact)
    return refuse(p, "positions", "compact", "original positions only");
  if (p.score_positions == ScorePositions::none) {
    return refuse(p, "score_positions", "none", "the scorer reads keys at their positions");
  }
  if (p.min_context > 0) return refuse(p, "min_context", fmt::format("{}", p.min_context), runs);
  if (p.selection_cache && p.scope != VoteScope::layer) {
    return refuse(p, "scope", "group",
                  "the selection cache runs with scope=layer; add selection_cache=false");
  }
  g.sparse = true;
  g.layer_vote = p.scope == VoteScope::layer;
  g.top_k = p.top_k;
  g.sinks = p.sinks;
  g.local = p.local;
  g.chunk_prefill = p.prefill == PrefillMode::chunk;
  g.prefill_tail = p.prefill_tail;
  g.compact_beyond_train = p.positions == PositionMode::auto_;
  g.selection_cache = p.selection_cache;
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

// What `sieve analyze` measured, and its three renderings: the JSON object (the record),
// a self-contained HTML page with inline SVG plots drawn from that JSON, and a short
// terminal summary.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sparse/analysis.h"

namespace sieve::cli {

// One analysed query in one layer.
struct AnalyzeCell {
  std::vector<double> recall;        // [n_budget * n_method] attention mass recall; NaN: the
                                     // method had no input for this query (h2o without history)
  std::vector<double> block_recall;  // [n_block] recall@k of the critical set
  std::vector<double> logit_l1;      // [n_head] L1 norm of the raw q.K logits
  // Top-p budget of the true attention, [n_head * n_mass]: the fewest keys holding each mass,
  // over all keys and over the middle keys (renormalised; -1 when there are none).
  std::vector<int32_t> top_p_all, top_p_mid;
  // Against the previous analysed query (NaN for the first): mean over heads of the cosine of
  // the post-RoPE queries, of the queries rotated back to position 0, and the cosine of the
  // selection-cache fingerprints (mean over heads of the rotated query).
  double cos_raw = NAN, cos_rotated = NAN, cos_fingerprint = NAN;
};

struct AnalyzeRun {
  std::string model, arch;
  int32_t n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0, threads = 0;
  std::vector<int32_t> layers;  // analysed layers (full attention)
  int32_t prompt_tokens = 0, decode_steps = 0;
  std::vector<int32_t> query_positions;  // [n_query]
  std::vector<int32_t> budget_requested;
  std::vector<BudgetSplit> budgets;  // [n_budget] as applied to the first query's context
  std::vector<AnalysisMethod> methods;
  int32_t recall_k = 0;  // critical set size at the first query
  std::vector<int32_t> blocks;
  int32_t sketch_dim = 0, quest_block = 16, h2o_history = 0;
  float theta = 0.9f;
  std::vector<double> masses;  // top-p budget masses
  int32_t exclude_sinks = 0, exclude_window = 0;
  std::string head_plan;  // path, "" without one
  std::vector<uint8_t>
      retrieval;  // [n_layers analysed * n_head] 1: retrieval head; empty without a plan
  std::vector<std::vector<AnalyzeCell>> cells;  // [n_query][n_layers analysed]
  std::vector<std::string> notes;
  double prefill_ms = 0, decode_ms = 0, analysis_ms = 0;
};

nlohmann::json analyze_json(const AnalyzeRun& r);
std::string analyze_html(const nlohmann::json& j);
std::string analyze_text(const nlohmann::json& j);

}  // namespace sieve::cli

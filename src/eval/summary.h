// Aggregates of sample records: one row per (model, backend, format, task, ctx, policy).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "eval/records.h"

namespace sieve::eval {

struct SummaryRow {
  std::string model, backend, format, stop, suite, task, policy;
  int32_t ctx = 0;
  int64_t n = 0;
  double accuracy = 0;       // mean score x 100 (RULER's scale)
  double prefill_tok_s = 0;  // computed prompt tokens / prefill time (cached prefixes excluded)
  double decode_tok_s = 0;   // generated tokens / decode time
  double selected_fraction = -1;  // mean over the samples that report it; < 0: none does
  double mean_prompt_tokens = 0;
  int64_t empty_outputs = 0;  // RULER's "nulls"
};

// Rows sorted by model, backend, format, policy, task (registry order), ctx.
std::vector<SummaryRow> summarize(std::span<const SampleRecord> records);

// Mean accuracy over tasks per (policy, ctx) for rows of one model/backend/format and a suite
// filter ("" = every task). Tasks missing at some length are simply absent from its mean.
struct AverageRow {
  std::string policy;
  int32_t ctx = 0;
  double accuracy = 0;
  int64_t tasks = 0;
};
std::vector<AverageRow> average_over_tasks(std::span<const SummaryRow> rows,
                                           std::string_view suite);

// The --json summary object of one model:
// {"model", "backend", "format", "stop", "results": [{"task", "ctx", "policy", "accuracy", "n",
//  "prefill_tok_s", "decode_tok_s", "selected_fraction"}], "averages": [...]}
nlohmann::json summary_json(std::span<const SummaryRow> rows);

// Distinct (model, backend, format, stop) groups in rows, in order: results of different
// groups are never averaged together.
struct RunGroup {
  std::string model, backend, format, stop;
  bool operator==(const RunGroup&) const = default;
};
std::vector<RunGroup> run_groups(std::span<const SummaryRow> rows);
std::vector<SummaryRow> rows_of(std::span<const SummaryRow> rows, const RunGroup& g);

}  // namespace sieve::eval

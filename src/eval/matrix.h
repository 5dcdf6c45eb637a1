// The evaluation matrix: tasks x lengths x policies for one model (the CLI loops over models).
// Samples already in the store are skipped, so an interrupted run resumes where it stopped;
// within a (policy, length) the samples run in an order that lets the runner reuse cached
// prompt prefixes (depth sweeps go from the deepest needle up).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/result.h"
#include "eval/prompt.h"
#include "eval/records.h"
#include "eval/runner.h"
#include "eval/task.h"
#include "model/hparams.h"

namespace sieve::eval {

struct MatrixSpec {
  std::vector<std::string> tasks;   // task names (expand_task_names)
  std::vector<int32_t> lengths;     // context lengths in tokens
  std::vector<PolicyPtr> policies;  // from make_policy (nullptr: dense); labels distinct
  int32_t n = 5;                    // samples per task and length
  int32_t grid_n = 1;               // niah grid: samples per depth and length
  std::vector<double> depths = {0, 25, 50, 75, 100};  // niah grid depths (percent)
  uint64_t seed = 42;
  bool stop_at_newline = false;  // see CompletionRequest::stop_at_newline
};

struct RunIdentity {
  std::string model;    // recorded name
  std::string backend;  // runner backend()
};

struct MatrixEvents {
  // Before the first sample: samples in the matrix, how many are already done, and the
  // total work (sum of context lengths) still to run, for an ETA.
  std::function<void(int64_t total, int64_t done, int64_t work)> planned;
  // After each sample run now (not the skipped ones): the record and its work (its ctx).
  std::function<void(const SampleRecord&, int64_t work)> sample_done;
  // Before generating a (policy, task, ctx) group.
  std::function<void(const std::string& policy, const std::string& task, int32_t ctx)>
      group_started;
};

// What RoPE flags changed from the model file's scaling, as a suffix of the recorded model
// name: "" when the scaling is the file's, "+yarn4" (YaRN x4 from the training context),
// "+linear2/4096" (another original context), ":ext..:attn..:beta../.." appended when those
// differ from the flags' defaults, "+norope-scaling" when the flags turned the file's off. A
// run under YaRN is another model's samples: resuming never takes one for the other and the
// reports keep them apart.
std::string rope_model_suffix(const RopeScaling& file, const ModelHParams& hp);

// Checks names, lengths, policies and counts; errors name the bad value.
Status validate_spec(const MatrixSpec& spec);

// Runs what is missing and returns every record of the matrix (old and new), in plan order.
// With runner.max_parallel() = K > 1, up to K missing samples (in plan order) run at once, each
// complete() on its own thread; their records are stored in plan order when all K are done.
Result<std::vector<SampleRecord>> run_matrix(const MatrixSpec& spec, const RunIdentity& id,
                                             const TaskContext& tc, const PromptEncoder& enc,
                                             Runner_i& runner, SampleStore& store,
                                             const MatrixEvents& ev = {});

// The record key fields of a planned sample (what resuming compares).
SampleRecord planned_record(const SampleSpec& s, const Task& task, const RunIdentity& id,
                            const std::string& format, const std::string& policy,
                            const TaskContext& tc);

}  // namespace sieve::eval

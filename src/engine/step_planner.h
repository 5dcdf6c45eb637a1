// Step planning under a latency budget: every running decode rides in every step, and the
// time left under the budget goes to prefill chunks, sized by a cost model of a step that is
// refitted from measured steps. A running stream therefore waits for at most one bounded
// step, whatever prompts arrive (vLLM's chunked prefill with decodes first, but the budget is
// time, not a token count).
//
// The cost model is linear in what a step does:
//   ms = c_step + c_gemm * [more than one row] + c_prefill * prefill tokens
//        + c_decode * decode tokens + c_kv * keys read
// (c_gemm: a step of more than one row runs the matrix-matrix kernels, which unpack every
// weight once per step: on the CPU that fixed cost is about one more pass over the weights, as
// much again as a single-row (matrix-vector) step. A batch of decodes pays it as much as a step
// with a prefill chunk does, so a chunk added to two or more decodes does not pay it again.)
// where a chunk of n tokens at depth d reads n*d + n*(n+1)/2 keys (causal) and a decode at depth
// d reads d + 1. It is fitted by exponentially weighted least squares over the recent steps,
// pulled toward a prior (so that a coefficient the recent steps say nothing about, e.g. the
// prefill cost during a decode-only stretch, keeps its last estimate), with non-negative
// coefficients. A linear model is not exact (a CPU matmul of 16 rows is less efficient per row
// than one of 512), so the prediction is also multiplied by a running ratio of measured to
// predicted time, one for decode-only steps and one for steps with prefill, which corrects
// the fit's bias where the planner works within a few steps.
//
// Without a fixed --max-step-ms, auto_step_budget() picks the budget: the shortest step whose
// prefill throughput stays within a fraction (kAutoEfficiency) of what a full-size chunk
// would give. Shorter steps would lower the inter-token latency further but spend more of
// each step on its fixed costs, and time to first token grows with every such step.
//
// The CPU's matrix-matrix kernels take activation rows 8 at a time (PlannerConfig::row_group):
// a step of 9 rows costs about what one of 16 does. Under a time budget the last prompt's
// chunk is therefore grown to fill its group of rows where the limits allow (those tokens are
// nearly free), and the auto budget is looked for among such chunk sizes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace sieve {

// What one step does, as the cost model sees it.
struct StepShape {
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  int64_t kv_reads = 0;  // keys attended, summed over the step's rows (dense upper bound)

  void add_prefill(int64_t n, int64_t depth);  // a chunk of n tokens after `depth` in the KV
  void add_decode(int64_t depth);              // one token after `depth`
};

// Keys a chunk of n tokens at depth d attends (causal): n*d + n*(n+1)/2.
int64_t chunk_kv_reads(int64_t n, int64_t depth);

class StepCostModel {
 public:
  static constexpr int kFeatures = 5;  // step, GEMM step, prefill token, decode token, key read
  using Coef = std::array<double, kFeatures>;

  // prior: ms per step, per step of more than one row, per prefill token, per decode token, per
  // key read.
  explicit StepCostModel(Coef prior = default_prior(), double forget = 0.95);
  // A deliberately slow guess (a ~100M-parameter model on one slow core), so that the first
  // steps under a budget are small rather than over it; measured steps correct it within a few.
  static Coef default_prior() { return {5.0, 20.0, 2.0, 2.0, 2e-5}; }

  double predict_ms(const StepShape& s) const;
  double linear_ms(const StepShape& s) const;  // the fit without the bias correction
  // A measured step: refits the coefficients.
  void observe(const StepShape& s, double ms);
  // ms per step, per step of more than one row, per prefill token, per decode token, per key.
  Coef per_unit() const;
  int64_t n_observed() const { return n_observed_; }

 private:
  static std::array<double, kFeatures> features(const StepShape& s);
  void refit();

  Coef prior_;  // in the scaled units of features()
  double forget_;
  std::array<std::array<double, kFeatures>, kFeatures> xtx_{};  // weighted sum of x x^T
  std::array<double, kFeatures> xty_{};                         // weighted sum of x * ms
  Coef coef_;                                // ms per unit of each scaled feature
  std::array<double, 2> bias_ = {1.0, 1.0};  // measured / linear: decode-only, with prefill
  int64_t n_observed_ = 0;
};

struct PlannerConfig {
  double max_step_ms = 0;          // the step budget; <= 0: no time budget (token budget only)
  int32_t max_batch_tokens = 512;  // tokens per step at most (decodes + prefill chunks)
  int32_t max_chunk = 512;         // one request's prefill chunk at most
  int32_t min_chunk = 16;          // the first waiting prompt gets at least this every step
  // Under a time budget, chunks grow so that the step's rows (decodes + prefill tokens) fill a
  // multiple of this where the limits allow: the rows the CPU GEMM takes per pass. 1: off.
  int32_t row_group = 1;
};

// A prompt (or a preempted request's prompt + generated tokens) still being prefilled.
struct PrefillSlot {
  int32_t pending = 0;  // tokens not yet in the KV
  int32_t depth = 0;    // tokens already in the KV
  int32_t fixed = 0;    // > 0: this chunk size regardless of budget (UniPrefill's one chunk)
};

// The auto budget: the predicted time of a step carrying `decodes` and the smallest chunk of
// the first prompt in `prefills` whose prefill throughput (tokens per ms of the whole step) is
// at least `efficiency` times that of the largest chunk the token budget allows. 0 when there
// is no decode (nobody waits on the step) or no prompt.
constexpr double kAutoEfficiency = 0.9;
double auto_step_budget(const StepCostModel& cost, const PlannerConfig& cfg,
                        const StepShape& decodes, std::span<const PrefillSlot> prefills,
                        double efficiency = kAutoEfficiency);

// Chunk sizes for `prefills` (in fairness order: priority, then arrival) in a step that
// already carries `decodes` (one token each): 0 = no chunk this step.
// Without a time budget: the token budget in order (today's first-come-first-served fill).
// With one: a min_chunk to the first prompt, always (prefill never starves), and to each prompt
// with fewer tokens left than the first while the step stays under the budget; then the
// budget is filled, those shorter prompts first, then the first and the rest in order, each
// chunk as large as the predicted step time allows. Prompts of equal length are served first
// come, first served; a short prompt behind a long one starts within a few steps.
std::vector<int32_t> plan_prefill_chunks(const StepCostModel& cost, const PlannerConfig& cfg,
                                         const StepShape& decodes,
                                         std::span<const PrefillSlot> prefills);

}  // namespace sieve

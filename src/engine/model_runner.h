// The seam between the scheduler and a backend: a runner executes one scheduled step (prefill
// chunks and decode tokens of many sequences) over the paged KV and returns logits. The CPU
// runner is Forward (forward.h); the CUDA runner lives in src/gpu (cuda_runner.h). The page
// tables, the prefix cache, eviction and preemption stay in the host-side KvStore, which both
// runners read; where the K/V rows themselves live (host arenas or device memory) is the
// runner's business.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace sieve {

// One sequence's part of a step. The chunk's tokens must already be reserved in the store
// (KvStore::reserve): they are the last tokens.size() tokens of the sequence, and the
// runner writes their K/V rows.
struct BatchEntry {
  KvSeqId seq = 0;
  std::span<const int32_t> tokens;    // the chunk
  bool all_logits = false;            // logits for every token of the chunk, else the last only
  class SparseSeq* sparse = nullptr;  // sparse policy state; nullptr: dense attention
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // "cpu" or "cuda": what errors and stats name.
  virtual std::string_view backend() const = 0;
  // Whether this runner executes a (resolved) policy; the error names the knob and the
  // backend. The scheduler refuses a request whose policy fails it.
  virtual Status supports(const PolicyConfig& p) const = 0;
  // Runs the step. logits receives, entry by entry, the rows asked for: all tokens of an
  // entry with all_logits, else its last token ([n_rows, n_vocab] row-major).
  virtual Status run(std::span<const BatchEntry> batch, std::vector<float>& logits) = 0;

  // Runners that keep the K/V rows themselves (device memory): the bytes of page data they
  // can hold (0: the engine sizes the store from its own budget, in host memory), and the
  // store they run over, given once before the first step (they allocate its pages then).
  virtual int64_t kv_capacity_bytes() const { return 0; }
  virtual bool host_rows() const { return true; }
  virtual Status attach(KvStore& kv) { return {}; }
};

// What a runner is sized for: the engine's per-request context, sequences and tokens a step.
struct RunnerLimits {
  int32_t n_ctx = 0;
  int32_t max_running = 0;
  int32_t max_batch_tokens = 0;
};

// Makes the runner of a backend other than the CPU's for a loaded model (the frontends wire
// the CUDA backend's here; the engine layer does not depend on it).
using RunnerFactory =
    std::function<Result<std::unique_ptr<ModelRunner>>(const Model&, const RunnerLimits&)>;

}  // namespace sieve

// `sieve bench --backend cuda --batch-seqs 1,8`: decode speed at depth on the GPU, per prompt
// length, policy and batch, through the engine (--backend cpu runs the same on the CPU engine).
// Each policy prefills the prompt once (its time to first token), then B sequences that share that
// prompt (prefix-cache hits for all but the last page; each with its own selection state and decode
// KV) decode --n-decode tokens together. Sharing the prefix keeps the cost of batch 8 at 512K to
// one prefill, and is honest for decode speed: every sequence's attention still reads all of its
// keys (through the same physical pages, so reads that coincide in time may hit L2; the rows report
// the bytes floor of distinct KV beside dense's step time). Also: the KV pool, each policy's bytes
// per token and how many sequences of the length fit in the pool. docs/gpu.md, "Decode at depth".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "sparse/policy.h"

namespace sieve::cli {

struct DepthOptions {
  std::string backend = "cuda";  // or "cpu": the CPU engine (the harness checked without a GPU)
  int32_t threads = 0;           // cpu: the engine's threads (0: all)
  std::vector<int32_t> lengths;
  // Sequences decoded together; 0 stands for "fit": as many as the pool holds at the length
  // under the policy (from the previous batch's bytes per sequence), at most fit_cap.
  std::vector<int32_t> batch_seqs;
  int32_t fit_cap = 64;
  int32_t n_decode = 128;
  int32_t reps = 3;
  int32_t warmup = 1;
  double mem_fraction = 0.9;
  // Prefill every length once with this policy and decode every policy over it (the prefix
  // cache keyed by it); nullptr: each policy prefills its own copy (its own time to first token).
  PolicyPtr shared_prefill;
  // With shared_prefill: each policy also prefills its own copy once, for its time to first
  // token (its batches still decode over the shared prompt).
  bool own_ttft = false;
  // Each row is also appended here as one JSON line the moment it is measured (a run cut short
  // keeps its rows); empty: none.
  std::string rows_out;
  // Policy items that could not be built (item, why): rows with the error, after the others'.
  std::vector<std::pair<std::string, std::string>> refused;
};

// Parses --batch-seqs ("1,8,fit"); a UserError for anything else.
std::vector<int32_t> parse_batch_seqs(const std::vector<std::string>& items);

// Rows appended to `results` (one per length x policy x batch; a policy the GPU refuses gets
// rows with "error" and the run goes on); a UserError when the backend cannot run at all.
void run_depth_bench(const Model& model, const std::vector<int32_t>& prompt,
                     const std::vector<PolicyPtr>& policies, const DepthOptions& o,
                     nlohmann::json& results, std::string& device);

}  // namespace sieve::cli

// Per-sample records (one JSON object per line in samples.jsonl) and the store that makes a
// matrix resumable: a sample whose key is already in the file is not run again.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"

namespace sieve::eval {

// Bumped whenever a generator changes what it produces, so old records stop matching and
// drop out of the reports. (2: the first committed harness; 1 was its uncommitted draft.)
inline constexpr int k_generator_version = 2;

struct SampleRecord {
  // What makes the sample (its key).
  std::string model;    // model file name, or the server's model name
  std::string backend;  // "local" or the server URL
  std::string format;   // "raw" | "chat"
  std::string stop;     // "" (generate to the limit) | "newline" (answer line only)
  std::string policy;   // the requested policy's label (policy_label: "tokenselect top_k=1024")
  std::string task;
  int32_t ctx = 0;
  int32_t index = 0;
  uint64_t seed = 0;
  std::string data_version;  // generator version (+ essay corpus fingerprint)
  // The sample.
  std::string id;  // "task/ctx/index"
  std::string suite;
  std::string metric;
  double target_depth = -1;  // depth-swept tasks: requested needle depth (percent)
  double depth = -1;         // measured needle position (percent), -1 when none
  int64_t units = 0;         // haystack units
  int64_t pad = 0;           // filler pieces after them
  int64_t prompt_tokens = 0;
  int32_t max_new_tokens = 0;
  std::string prompt_hash;  // FNV-1a of the prompt token ids (hex)
  std::vector<std::string> answers;
  // The run.
  std::string output;
  double score = 0;  // in [0, 1]
  int64_t prefill_tokens = 0;
  int64_t reused_tokens = 0;
  int64_t completion_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  double selected_fraction = -1;  // fraction of the KV attention read; < 0: not reported (null)
  double mean_selected = -1;  // mean tokens per selection (SparseStats); < 0: not reported (null)
  std::string policy_ran;     // the policy the backend says ran (auto resolved); "" unknown
  std::string finished_at;    // UTC, ISO 8601
};

// What identifies a sample's run: model, backend, format, stop, policy, task, ctx, index, seed,
// target depth and data version. Two runs with one key are the same sample (resuming skips).
std::string record_key(const SampleRecord& r);

// "g<version>": how data_version starts for records of this build's generators.
std::string generator_tag();
// The records made by this build's generators (the reports use only those), and how many
// others there were.
std::vector<SampleRecord> current_records(std::span<const SampleRecord> records,
                                          int64_t* skipped = nullptr);

nlohmann::json to_json(const SampleRecord& r);
Result<SampleRecord> record_from_json(const nlohmann::json& j);

class SampleStore {
 public:
  // Reads `path` when it exists (lines that do not parse, e.g. one cut short by a killed
  // run, are counted and skipped) and appends to it from then on.
  static Result<std::unique_ptr<SampleStore>> open(const std::string& path);
  const SampleRecord* find(const std::string& key) const;
  // Writes one line and flushes it, so a finished sample survives an interrupted run.
  Status append(const SampleRecord& r);
  const std::vector<SampleRecord>& records() const { return records_; }
  int64_t bad_lines() const { return bad_lines_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<SampleRecord> records_;
  std::map<std::string, size_t> by_key_;
  int64_t bad_lines_ = 0;
};

// UTC now as "2025-01-31T12:34:56Z".
std::string utc_now_iso();

}  // namespace sieve::eval

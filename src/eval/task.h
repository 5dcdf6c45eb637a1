// Long-context tasks: RULER's synthetic tasks, InfiniteBench's retrieval tasks and a
// needle-in-a-haystack depth x length grid. A task builds one instance from a sample's seed
// and an amount of haystack: whole "units" (noise lines, essay words, JSON pairs...) plus a
// little "pad" (filler pieces after the last unit, e.g. the first words of one more noise
// line); the length search (prompt.h) picks both so that the prompt fills the requested
// context to within a token or two.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "eval/haystack.h"
#include "eval/scoring.h"

namespace sieve::eval {

// One generated instance, before the model's template is applied.
struct TaskText {
  std::string input;          // instruction + context + question
  std::string answer_prefix;  // the text the model continues from (RULER's answer prefix)
  std::vector<std::string> answers;
  double depth = -1;  // where the (first queried) needle sits in the context, percent
};

// What identifies one sample of a task at one length.
struct SampleSpec {
  std::string task;
  int32_t ctx = 0;
  int32_t index = 0;
  uint64_t seed = 0;
  double target_depth = -1;  // depth-swept tasks: where the needle goes (percent); else < 0
};

struct TaskInfo {
  std::string name;
  std::string suite;  // "ruler" | "infinitebench" | "niah"
  Metric metric = Metric::string_match_all;
  int32_t max_new_tokens = 128;
  bool needs_essays = false;
  bool depth_sweep = false;  // samples sweep target depths (heatmaps)
  std::string description;
};

// Shared inputs of the builders.
struct TaskContext {
  std::shared_ptr<const EssayCorpus> essays;  // null when not loaded
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const TaskInfo& info() const = 0;
  // The instance with `units` of haystack and `pad` filler pieces (0 <= pad <= max_pad()).
  // A pure function of (spec, units, pad, essays): the length search calls it many times and
  // must see the same needles every time. For fixed units the prompt grows with pad (by about
  // one unit's tokens at most), leaving the rest of the instance as it is.
  virtual Result<TaskText> build(const SampleSpec& s, int64_t units, int64_t pad,
                                 const TaskContext& c) const = 0;
  Result<TaskText> build(const SampleSpec& s, int64_t units, const TaskContext& c) const {
    return build(s, units, 0, c);
  }
  // A first guess of the units that fill `tokens` tokens (the search refines it).
  virtual int64_t units_guess(int64_t tokens) const = 0;
  // The fewest units an instance can have (e.g. one line per needle).
  virtual int64_t min_units() const { return 1; }
  // Filler pieces one unit can be topped up with (0: the units are fine enough, e.g. words).
  virtual int64_t max_pad() const { return 0; }
};

// Every task, in report order.
std::span<const std::unique_ptr<Task>> all_tasks();
const Task* find_task(std::string_view name);

// Expands names and groups ("ruler", "infinitebench" or "ib", "niah", "all") into task names,
// in registry order without repeats. Unknown names are an error listing the valid ones.
Result<std::vector<std::string>> expand_task_names(std::span<const std::string> names);

// The samples of one task at one length; a sample is the same whatever the other samples
// planned (so raising n or adding depths only adds samples). Depth-swept InfiniteBench tasks:
// sample i puts its needle at sweep_depth(i), which spreads any n over 0..100 (evenly for
// n = 2^k + 1), as InfiniteBench sweeps the needle position. The niah grid: `grid_n` samples
// (index 0..grid_n-1) at each of `depths`, seeded by depth and index. Others: n samples.
std::vector<SampleSpec> plan_samples(const Task& t, int32_t ctx, int32_t n, int32_t grid_n,
                                     std::span<const double> depths, uint64_t seed);

// "task/ctx/index"; the niah grid's "niah/ctx/dDEPTH/index" (its index counts per depth).
std::string sample_id(const SampleSpec& s);

// 50, 0, 100, 25, 75, 12.5, 62.5, 37.5, 87.5, ...: the midpoint, both ends, then the binary
// van der Corput sequence; each prefix of the sequence covers [0, 100] about evenly.
double sweep_depth(int64_t i);

// Builders shared by the task files.
std::unique_ptr<Task> make_ruler_task(std::string_view name);
std::unique_ptr<Task> make_infinitebench_task(std::string_view name);
std::unique_ptr<Task> make_niah_grid_task();
std::vector<std::string> ruler_task_names();
std::vector<std::string> infinitebench_task_names();

// Replaces each "{name}" in `tmpl` with its value (templates come from the suites, which use
// Python's str.format; no escapes are needed in them).
std::string fill_template(
    std::string_view tmpl,
    std::initializer_list<std::pair<std::string_view, std::string_view>> vars);

// Percent position of `needle` within `context` (by bytes), or -1 when absent.
double depth_of(std::string_view context, std::string_view needle);

}  // namespace sieve::eval

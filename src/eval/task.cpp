#include "eval/task.h"

#include <fmt/format.h>

#include <algorithm>

#include "eval/eval_rng.h"

namespace sieve::eval {
namespace {

std::vector<std::unique_ptr<Task>> build_registry() {
  std::vector<std::unique_ptr<Task>> v;
  for (const std::string& n : ruler_task_names()) v.push_back(make_ruler_task(n));
  for (const std::string& n : infinitebench_task_names()) v.push_back(make_infinitebench_task(n));
  v.push_back(make_niah_grid_task());
  return v;
}

}  // namespace

std::span<const std::unique_ptr<Task>> all_tasks() {
  static const std::vector<std::unique_ptr<Task>> tasks = build_registry();
  return tasks;
}

const Task* find_task(std::string_view name) {
  for (const auto& t : all_tasks()) {
    if (t->info().name == name) return t.get();
  }
  return nullptr;
}

Result<std::vector<std::string>> expand_task_names(std::span<const std::string> names) {
  std::vector<bool> want(all_tasks().size(), false);
  for (const std::string& raw : names) {
    const std::string_view n = raw;
    bool matched = false;
    for (size_t i = 0; i < all_tasks().size(); ++i) {
      const TaskInfo& info = all_tasks()[i]->info();
      const bool group =
          n == "all" || n == info.suite || (n == "ib" && info.suite == "infinitebench");
      // "niah" is both a suite and its one task: either way the grid.
      if (group || n == info.name) {
        want[i] = true;
        matched = true;
      }
    }
    if (!matched) {
      std::string valid = "all, ruler, infinitebench (ib), niah";
      for (const auto& t : all_tasks()) {
        if (t->info().name != "niah") valid += ", " + t->info().name;
      }
      return make_error("unknown task '{}'; valid tasks and groups: {}", raw, valid);
    }
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < all_tasks().size(); ++i) {
    if (want[i]) out.push_back(all_tasks()[i]->info().name);
  }
  return out;
}

std::vector<SampleSpec> plan_samples(const Task& t, int32_t ctx, int32_t n, int32_t grid_n,
                                     std::span<const double> depths, uint64_t seed) {
  std::vector<SampleSpec> out;
  const TaskInfo& info = t.info();
  auto add = [&](int32_t index, double depth, std::string_view seed_name) {
    SampleSpec s;
    s.task = info.name;
    s.ctx = ctx;
    s.index = index;
    s.seed = derive_seed(seed, seed_name, ctx, index);
    s.target_depth = depth;
    out.push_back(std::move(s));
  };
  if (info.name == "niah") {
    for (double d : depths) {
      const std::string seed_name = fmt::format("{}@{:g}", info.name, d);
      for (int32_t r = 0; r < grid_n; ++r) add(r, d, seed_name);
    }
  } else if (info.depth_sweep) {
    for (int32_t i = 0; i < n; ++i) add(i, sweep_depth(i), info.name);
  } else {
    for (int32_t i = 0; i < n; ++i) add(i, -1, info.name);
  }
  return out;
}

std::string sample_id(const SampleSpec& s) {
  if (s.task == "niah")
    return fmt::format("{}/{}/d{:g}/{}", s.task, s.ctx, s.target_depth, s.index);
  return fmt::format("{}/{}/{}", s.task, s.ctx, s.index);
}

double sweep_depth(int64_t i) {
  if (i == 0) return 50;
  if (i == 1) return 0;
  if (i == 2) return 100;
  // Van der Corput: the bits of i - 1 mirrored behind the binary point (2 -> .01 = 25).
  double v = 0, unit = 0.5;
  for (int64_t k = i - 1; k > 0; k >>= 1, unit /= 2) {
    if (k & 1) v += unit;
  }
  return 100 * v;
}

std::string fill_template(
    std::string_view tmpl,
    std::initializer_list<std::pair<std::string_view, std::string_view>> vars) {
  std::string out;
  out.reserve(tmpl.size());
  size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] == '{') {
      const size_t close = tmpl.find('}', i);
      if (close != std::string_view::npos) {
        const std::string_view name = tmpl.substr(i + 1, close - i - 1);
        const auto it =
            std::find_if(vars.begin(), vars.end(), [&](auto& kv) { return kv.first == name; });
        if (it != vars.end()) {
          out += it->second;
          i = close + 1;
          continue;
        }
      }
    }
    out += tmpl[i++];
  }
  return out;
}

double depth_of(std::string_view context, std::string_view needle) {
  const size_t p = context.find(needle);
  if (p == std::string_view::npos || context.empty()) return -1;
  return 100.0 * static_cast<double>(p) / static_cast<double>(context.size());
}

}  // namespace sieve::eval

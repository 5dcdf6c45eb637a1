#include "eval/summary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "eval/task.h"

namespace sieve::eval {

using json = nlohmann::json;

namespace {

int task_order(const std::string& name) {
  const auto tasks = all_tasks();
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i]->info().name == name) return static_cast<int>(i);
  }
  return static_cast<int>(tasks.size());  // unknown tasks (older records) last
}

double round2(double x) {
  return std::round(x * 100.0) / 100.0;
}

}  // namespace

std::vector<SummaryRow> summarize(std::span<const SampleRecord> records) {
  struct Acc {
    SummaryRow row;
    double score = 0, sel = 0, prompt = 0, prefill_ms = 0, decode_ms = 0;
    int64_t prefill_tok = 0, decode_tok = 0, sel_n = 0;
  };
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string, int,
                         std::string, int32_t>;
  std::map<Key, Acc> acc;
  for (const SampleRecord& r : records) {
    Key k{r.model, r.backend, r.format, r.stop, r.policy, task_order(r.task), r.task, r.ctx};
    Acc& a = acc[k];
    if (a.row.n == 0) {
      a.row.model = r.model;
      a.row.backend = r.backend;
      a.row.format = r.format;
      a.row.stop = r.stop;
      a.row.suite = r.suite;
      a.row.task = r.task;
      a.row.policy = r.policy;
      a.row.ctx = r.ctx;
    }
    a.row.n++;
    a.score += r.score;
    if (r.selected_fraction >= 0) {
      a.sel += r.selected_fraction;
      a.sel_n++;
    }
    a.prompt += static_cast<double>(r.prompt_tokens);
    a.prefill_ms += r.prefill_ms;
    a.decode_ms += r.decode_ms;
    a.prefill_tok += r.prefill_tokens;
    a.decode_tok += r.completion_tokens;
    bool empty = true;
    for (char c : r.output) empty = empty && static_cast<unsigned char>(c) <= ' ';
    a.row.empty_outputs += empty;
  }
  std::vector<SummaryRow> out;
  for (auto& [k, a] : acc) {
    SummaryRow row = a.row;
    const auto n = static_cast<double>(row.n);
    row.accuracy = round2(100.0 * a.score / n);
    row.selected_fraction = a.sel_n > 0 ? a.sel / static_cast<double>(a.sel_n) : -1;
    row.mean_prompt_tokens = a.prompt / n;
    row.prefill_tok_s =
        a.prefill_ms > 0 ? static_cast<double>(a.prefill_tok) * 1000.0 / a.prefill_ms : 0;
    row.decode_tok_s =
        a.decode_ms > 0 ? static_cast<double>(a.decode_tok) * 1000.0 / a.decode_ms : 0;
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<AverageRow> average_over_tasks(std::span<const SummaryRow> rows,
                                           std::string_view suite) {
  std::map<std::pair<std::string, int32_t>, std::pair<double, int64_t>> m;
  std::vector<std::string> policy_order;
  for (const SummaryRow& r : rows) {
    if (!suite.empty() && r.suite != suite) continue;
    auto& [sum, cnt] = m[{r.policy, r.ctx}];
    sum += r.accuracy;
    cnt++;
    if (std::find(policy_order.begin(), policy_order.end(), r.policy) == policy_order.end()) {
      policy_order.push_back(r.policy);
    }
  }
  std::vector<AverageRow> out;
  for (const std::string& p : policy_order) {
    for (auto& [k, v] : m) {
      if (k.first != p) continue;
      out.push_back({p, k.second, round2(v.first / static_cast<double>(v.second)), v.second});
    }
  }
  return out;
}

std::vector<RunGroup> run_groups(std::span<const SummaryRow> rows) {
  std::vector<RunGroup> out;
  for (const SummaryRow& r : rows) {
    RunGroup g{r.model, r.backend, r.format, r.stop};
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  return out;
}

std::vector<SummaryRow> rows_of(std::span<const SummaryRow> rows, const RunGroup& g) {
  std::vector<SummaryRow> out;
  for (const SummaryRow& r : rows) {
    if (r.model == g.model && r.backend == g.backend && r.format == g.format && r.stop == g.stop)
      out.push_back(r);
  }
  return out;
}

json summary_json(std::span<const SummaryRow> rows) {
  json j;
  j["model"] = rows.empty() ? "" : rows.front().model;
  j["backend"] = rows.empty() ? "" : rows.front().backend;
  j["format"] = rows.empty() ? "" : rows.front().format;
  j["stop"] = rows.empty() ? "" : rows.front().stop;
  j["results"] = json::array();
  for (const SummaryRow& r : rows) {
    j["results"].push_back(
        {{"task", r.task},
         {"ctx", r.ctx},
         {"policy", r.policy},
         {"accuracy", r.accuracy},
         {"n", r.n},
         {"prefill_tok_s", round2(r.prefill_tok_s)},
         {"decode_tok_s", round2(r.decode_tok_s)},
         {"selected_fraction", r.selected_fraction < 0 ? json(nullptr) : json(r.selected_fraction)},
         {"mean_prompt_tokens", round2(r.mean_prompt_tokens)},
         {"empty_outputs", r.empty_outputs}});
  }
  j["averages"] = json::array();
  for (const AverageRow& a : average_over_tasks(rows, "")) {
    j["averages"].push_back(
        {{"policy", a.policy}, {"ctx", a.ctx}, {"accuracy", a.accuracy}, {"tasks", a.tasks}});
  }
  return j;
}

}  // namespace sieve::eval

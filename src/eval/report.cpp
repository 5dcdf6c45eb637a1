#include "eval/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "eval/summary.h"
#include "eval/svg_plot.h"
#include "eval/task.h"

namespace sieve::eval {
namespace {

std::string ctx_name(int32_t ctx) {
  if (ctx >= 1024 && ctx % 1024 == 0) return fmt::format("{}K", ctx / 1024);
  return std::to_string(ctx);
}

std::vector<std::string> policies_of(std::span<const SummaryRow> rows) {
  std::vector<std::string> out;
  for (const SummaryRow& r : rows) {
    if (std::find(out.begin(), out.end(), r.policy) == out.end()) out.push_back(r.policy);
  }
  return out;
}

std::vector<std::string> tasks_of(std::span<const SummaryRow> rows) {
  std::vector<std::string> out;
  for (const SummaryRow& r : rows) {
    if (std::find(out.begin(), out.end(), r.task) == out.end()) out.push_back(r.task);
  }
  return out;
}

std::vector<int32_t> lengths_of(std::span<const SummaryRow> rows) {
  std::set<int32_t> s;
  for (const SummaryRow& r : rows) s.insert(r.ctx);
  return {s.begin(), s.end()};
}

const SummaryRow* find_row(std::span<const SummaryRow> rows, const std::string& policy,
                           const std::string& task, int32_t ctx) {
  for (const SummaryRow& r : rows) {
    if (r.policy == policy && r.task == task && r.ctx == ctx) return &r;
  }
  return nullptr;
}

std::vector<SampleRecord> records_of(std::span<const SampleRecord> records, const RunGroup& g) {
  std::vector<SampleRecord> out;
  for (const SampleRecord& r : records) {
    if (r.model == g.model && r.backend == g.backend && r.format == g.format && r.stop == g.stop)
      out.push_back(r);
  }
  return out;
}

// Speed and selection per (policy, ctx) over all tasks of a group.
struct SpeedRow {
  double prefill_tok_s = 0, decode_tok_s = 0, selected_fraction = 0;
  int64_t n = 0;
};
std::map<std::pair<std::string, int32_t>, SpeedRow> speed_by_length(
    std::span<const SampleRecord> recs) {
  struct Acc {
    double pf_ms = 0, dc_ms = 0, sel = 0;
    int64_t pf_tok = 0, dc_tok = 0, n = 0, sel_n = 0;
  };
  std::map<std::pair<std::string, int32_t>, Acc> acc;
  for (const SampleRecord& r : recs) {
    Acc& a = acc[{r.policy, r.ctx}];
    a.pf_ms += r.prefill_ms;
    a.dc_ms += r.decode_ms;
    a.pf_tok += r.prefill_tokens;
    a.dc_tok += r.completion_tokens;
    if (r.selected_fraction >= 0) {
      a.sel += r.selected_fraction;
      a.sel_n++;
    }
    a.n++;
  }
  std::map<std::pair<std::string, int32_t>, SpeedRow> out;
  for (auto& [k, a] : acc) {
    SpeedRow s;
    s.prefill_tok_s = a.pf_ms > 0 ? static_cast<double>(a.pf_tok) * 1000 / a.pf_ms : 0;
    s.decode_tok_s = a.dc_ms > 0 ? static_cast<double>(a.dc_tok) * 1000 / a.dc_ms : 0;
    s.selected_fraction = a.sel_n ? a.sel / static_cast<double>(a.sel_n) : -1;
    s.n = a.n;
    out[k] = s;
  }
  return out;
}

std::string group_title(const RunGroup& g) {
  return fmt::format("{} ({}, {} prompts{})", g.model, g.backend, g.format,
                     g.stop.empty() ? "" : ", answers cut at the first line");
}

std::string id_safe(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  }
  return s;
}

// Depth rows of a heatmap: the distinct target depths of the task's samples, or 10% bins
// when there are many.
std::vector<double> depth_rows(std::span<const SampleRecord> recs) {
  std::set<double> d;
  for (const SampleRecord& r : recs) {
    const double v = r.target_depth >= 0 ? r.target_depth : r.depth;
    if (v >= 0) d.insert(std::round(v * 10) / 10);
  }
  if (d.size() <= 21) return {d.begin(), d.end()};
  std::vector<double> bins;
  for (int i = 0; i <= 10; ++i) bins.push_back(i * 10.0);
  return bins;
}

size_t nearest(const std::vector<double>& rows, double v) {
  size_t best = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (std::fabs(rows[i] - v) < std::fabs(rows[best] - v)) best = i;
  }
  return best;
}

}  // namespace

std::string markdown_report(std::span<const SampleRecord> records, const ReportMeta& meta) {
  const std::vector<SummaryRow> all = summarize(records);
  std::string md = "# " + meta.title + "\n\n";
  if (!meta.generated_at.empty()) md += "Generated " + meta.generated_at + ".";
  if (!meta.command.empty()) md += " Command: `" + meta.command + "`.";
  md += "\n\n";
  for (const std::string& n : meta.notes) md += n + "\n\n";
  md +=
      "Accuracy is the mean per-sample score x 100 (RULER string_match_all, InfiniteBench exact "
      "match), n samples per cell.\n\n";
  for (const RunGroup& g : run_groups(all)) {
    const std::vector<SummaryRow> rows = rows_of(all, g);
    const std::vector<int32_t> lens = lengths_of(rows);
    md += "## " + group_title(g) + "\n\n";
    for (const std::string& p : policies_of(rows)) {
      md += "### Policy " + p + "\n\n| task |";
      for (int32_t L : lens) md += " " + ctx_name(L) + " |";
      md += "\n|---|";
      for (size_t i = 0; i < lens.size(); ++i) md += "---:|";
      md += "\n";
      for (const std::string& t : tasks_of(rows)) {
        md += "| " + t + " |";
        for (int32_t L : lens) {
          const SummaryRow* r = find_row(rows, p, t, L);
          md += r ? fmt::format(" {:.1f} (n={}) |", r->accuracy, r->n) : std::string(" - |");
        }
        md += "\n";
      }
      const std::vector<SummaryRow> prow = [&] {
        std::vector<SummaryRow> v;
        for (const SummaryRow& r : rows) {
          if (r.policy == p) v.push_back(r);
        }
        return v;
      }();
      for (const auto& [label, suite] :
           {std::pair<const char*, const char*>{"**mean, all tasks**", ""},
            {"mean, RULER", "ruler"},
            {"mean, InfiniteBench", "infinitebench"}}) {
        const std::vector<AverageRow> avg = average_over_tasks(prow, suite);
        if (avg.empty()) continue;
        int64_t n_tasks = 0;  // tasks of this suite the policy has at any length
        for (const std::string& t : tasks_of(prow)) {
          // a copy: clang before 16 cannot capture a structured binding
          n_tasks += std::any_of(prow.begin(), prow.end(), [&, s = suite](const SummaryRow& r) {
            return r.task == t && (*s == '\0' || r.suite == s);
          });
        }
        md += std::string("| ") + label + " |";
        for (int32_t L : lens) {
          auto it =
              std::find_if(avg.begin(), avg.end(), [&](const AverageRow& a) { return a.ctx == L; });
          if (it == avg.end()) {
            md += " - |";
          } else if (it->tasks < n_tasks) {  // an unfinished length: say over what
            md += fmt::format(" {:.1f} ({}/{} tasks) |", it->accuracy, it->tasks, n_tasks);
          } else {
            md += fmt::format(" {:.1f} |", it->accuracy);
          }
        }
        md += "\n";
      }
      md += "\n";
    }
    md +=
        "### Speed\n\n| policy | ctx | samples | prefill tok/s | decode tok/s | selected fraction "
        "|\n"
        "|---|---:|---:|---:|---:|---:|\n";
    const std::vector<SampleRecord> recs = records_of(records, g);
    for (const auto& [k, s] : speed_by_length(recs)) {
      md += fmt::format(
          "| {} | {} | {} | {:.0f} | {:.1f} | {} |\n", k.first, ctx_name(k.second), s.n,
          s.prefill_tok_s, s.decode_tok_s,
          s.selected_fraction < 0 ? std::string("-") : fmt::format("{:.3f}", s.selected_fraction));
    }
    md +=
        "\nPrefill tok/s counts the prompt tokens computed (a cached common prefix is excluded); "
        "decode tok/s counts generated tokens; selected fraction is the share of the KV that "
        "attention read, as the engine counts it (- when the backend does not report it).\n\n";
  }
  return md;
}

std::string html_report(std::span<const SampleRecord> records, const ReportMeta& meta) {
  const std::vector<SummaryRow> all = summarize(records);
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
       xml_escape(meta.title) +
       "</title>\n<style>\n"
       "body{font-family:system-ui,-apple-system,'Segoe "
       "UI',sans-serif;margin:24px;color:#222;max-width:1400px}\n"
       "h1{font-size:24px}h2{font-size:20px;margin-top:36px;border-bottom:1px solid "
       "#ccc}h3{font-size:16px}\n"
       "table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ddd;padding:3px "
       "8px;font-size:13px}\n"
       "th{background:#f4f4f4}td.num{text-align:right}td.out{max-width:520px;white-space:pre-wrap;"
       "font-family:ui-monospace,monospace;font-size:12px}\n"
       ".plots{display:flex;flex-wrap:wrap;gap:12px}\n"
       "svg.plot{background:#fff;border:1px solid #e4e4e4}\n"
       "svg .title{font-size:14px;font-weight:600}svg .tick{font-size:11px;fill:#555}"
       "svg .label{font-size:12px;fill:#333}svg .legend{font-size:12px}svg "
       ".cellv{font-size:11px;fill:#111}\n"
       "svg .grid{stroke:#eee}svg .axis{stroke:#888}\n"
       ".ok{color:#2a7d2a}.bad{color:#b22}.note{color:#555;font-size:13px}\n"
       "</style></head>\n<body>\n";
  h += "<h1>" + xml_escape(meta.title) + "</h1>\n<p class=\"note\">";
  if (!meta.generated_at.empty()) h += "Generated " + xml_escape(meta.generated_at) + ". ";
  if (!meta.command.empty()) h += "Command: <code>" + xml_escape(meta.command) + "</code>";
  h += "</p>\n";
  for (const std::string& n : meta.notes) h += "<p class=\"note\">" + xml_escape(n) + "</p>\n";
  if (all.empty()) h += "<p>No samples yet.</p>\n";

  int chart_no = 0;
  auto next_id = [&](const std::string& what) {
    return fmt::format("plot-{}-{}", ++chart_no, id_safe(what));
  };

  for (const RunGroup& g : run_groups(all)) {
    const std::vector<SummaryRow> rows = rows_of(all, g);
    const std::vector<SampleRecord> recs = records_of(records, g);
    const std::vector<std::string> pols = policies_of(rows);
    const std::vector<int32_t> lens = lengths_of(rows);
    h += "<h2>" + xml_escape(group_title(g)) + "</h2>\n";

    // Accuracy vs length.
    h += "<h3>Accuracy vs length</h3>\n<div class=\"plots\">\n";
    {
      LineChart c;
      c.id = next_id("mean-accuracy");
      c.title = "Mean accuracy over tasks";
      c.x_label = "context length (tokens)";
      c.y_label = "accuracy (%)";
      c.y_min = 0;
      c.y_max = 100;
      c.y_unit = "%";
      for (const std::string& p : pols) {
        Series s{p, {}};
        std::vector<SummaryRow> prow;
        for (const SummaryRow& r : rows) {
          if (r.policy == p) prow.push_back(r);
        }
        // Only lengths where every task of the policy has results: a mean over a subset
        // (an unfinished run) is not comparable with the others.
        const auto n_tasks = static_cast<int64_t>(tasks_of(prow).size());
        for (const AverageRow& a : average_over_tasks(prow, "")) {
          if (a.tasks == n_tasks) s.points.emplace_back(a.ctx, a.accuracy);
        }
        c.series.push_back(std::move(s));
      }
      for (int32_t L : lens) c.x_domain.push_back(L);
      h += svg_line_chart(c);
    }
    for (const std::string& t : tasks_of(rows)) {
      LineChart c;
      c.id = next_id("accuracy-" + t);
      c.title = t;
      c.x_label = "context length (tokens)";
      c.y_label = "accuracy (%)";
      c.y_min = 0;
      c.y_max = 100;
      c.y_unit = "%";
      c.compact = true;
      for (int32_t L : lens) c.x_domain.push_back(L);
      for (const std::string& p : pols) {
        Series s{p, {}};
        for (const SummaryRow& r : rows) {
          if (r.policy == p && r.task == t) s.points.emplace_back(r.ctx, r.accuracy);
        }
        c.series.push_back(std::move(s));
      }
      h += svg_line_chart(c);
    }
    h += "</div>\n";

    // Tables.
    for (const std::string& p : pols) {
      h += "<h3>Accuracy, policy " + xml_escape(p) + "</h3>\n<table><tr><th>task</th>";
      for (int32_t L : lens) h += "<th>" + ctx_name(L) + "</th>";
      h += "</tr>\n";
      for (const std::string& t : tasks_of(rows)) {
        h += "<tr><td>" + xml_escape(t) + "</td>";
        for (int32_t L : lens) {
          const SummaryRow* r = find_row(rows, p, t, L);
          if (!r) {
            h += "<td class=\"num\">-</td>";
            continue;
          }
          h += fmt::format(
              "<td class=\"num\" style=\"background:{}40\" title=\"n={}, mean prompt {:.0f} "
              "tokens\">{:.1f}</td>",
              score_color(r->accuracy), r->n, r->mean_prompt_tokens, r->accuracy);
        }
        h += "</tr>\n";
      }
      h += "</table>\n";
    }

    // Depth x length heatmaps per depth-swept task and policy.
    std::vector<std::string> depth_tasks;
    for (const std::string& t : tasks_of(rows)) {
      const Task* task = find_task(t);
      if (task && task->info().depth_sweep) depth_tasks.push_back(t);
    }
    if (!depth_tasks.empty()) {
      h += "<h3>Depth x length</h3>\n<div class=\"plots\">\n";
      for (const std::string& t : depth_tasks) {
        for (const std::string& p : pols) {
          std::vector<SampleRecord> cell_recs;
          for (const SampleRecord& r : recs) {
            if (r.task == t && r.policy == p) cell_recs.push_back(r);
          }
          const std::vector<double> drows = depth_rows(cell_recs);
          Heatmap hm;
          hm.id = next_id("heatmap-" + t + "-" + p);
          hm.title = t + " - " + p;
          hm.x_label = "context length";
          hm.y_label = "needle depth (%)";
          for (int32_t L : lens) hm.x_labels.push_back(ctx_name(L));
          for (double d : drows) hm.y_labels.push_back(fmt::format("{:g}", d));
          std::vector<std::vector<double>> sum(drows.size(), std::vector<double>(lens.size(), 0));
          hm.counts.assign(drows.size(), std::vector<int>(lens.size(), 0));
          for (const SampleRecord& r : cell_recs) {
            const double v = r.target_depth >= 0 ? r.target_depth : r.depth;
            if (v < 0 || drows.empty()) continue;
            const size_t row = nearest(drows, v);
            const size_t col =
                static_cast<size_t>(std::find(lens.begin(), lens.end(), r.ctx) - lens.begin());
            sum[row][col] += r.score * 100;
            hm.counts[row][col]++;
          }
          hm.values.assign(drows.size(), std::vector<double>(lens.size(), NAN));
          for (size_t i = 0; i < drows.size(); ++i) {
            for (size_t j = 0; j < lens.size(); ++j) {
              if (hm.counts[i][j] > 0) hm.values[i][j] = sum[i][j] / hm.counts[i][j];
            }
          }
          h += svg_heatmap(hm);
        }
      }
      h += "</div>\n";
    }

    // Speed and selection.
    h += "<h3>Speed and selection vs length</h3>\n<div class=\"plots\">\n";
    const auto speed = speed_by_length(recs);
    const auto speed_chart = [&](const std::string& title, const std::string& unit, auto field) {
      LineChart c;
      c.id = next_id(title);
      c.title = title;
      c.x_label = "context length (tokens)";
      c.y_label = unit;
      c.y_unit = " " + unit;
      for (const std::string& p : pols) {
        Series s{p, {}};
        for (const auto& [k, v] : speed) {
          const double y = field(v);
          if (k.first == p && y >= 0) s.points.emplace_back(k.second, y);
        }
        c.series.push_back(std::move(s));
      }
      return c;
    };
    h += svg_line_chart(
        speed_chart("Prefill speed", "tok/s", [](const SpeedRow& s) { return s.prefill_tok_s; }));
    h += svg_line_chart(
        speed_chart("Decode speed", "tok/s", [](const SpeedRow& s) { return s.decode_tok_s; }));
    {
      LineChart c = speed_chart("Selected fraction of the KV", "fraction",
                                [](const SpeedRow& s) { return s.selected_fraction; });
      c.y_min = 0;
      c.y_max = 1;
      h += svg_line_chart(c);
    }
    h += "</div>\n";

    // Samples.
    h += "<h3>Samples</h3>\n";
    for (const std::string& t : tasks_of(rows)) {
      int64_t n = 0;
      double sc = 0;
      for (const SampleRecord& r : recs) {
        if (r.task == t) {
          ++n;
          sc += r.score;
        }
      }
      h += fmt::format(
          "<details><summary>{} ({} samples, mean {:.1f})</summary>\n<table><tr><th>id</th>"
          "<th>policy</th><th>depth</th><th>prompt tok</th><th>answers</th><th>output</th>"
          "<th>score</th></tr>\n",
          xml_escape(t), n, n ? 100 * sc / static_cast<double>(n) : 0.0);
      for (const SampleRecord& r : recs) {
        if (r.task != t) continue;
        std::string answers;
        for (const std::string& a : r.answers) answers += (answers.empty() ? "" : ", ") + a;
        h += fmt::format(
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
            "<td class=\"out\">{}</td><td class=\"out\">{}</td><td class=\"num "
            "{}\">{:.2f}</td></tr>\n",
            xml_escape(r.id), xml_escape(r.policy),
            r.depth >= 0 ? fmt::format("{:.1f}", r.depth) : std::string("-"), r.prompt_tokens,
            xml_escape(answers), xml_escape(r.output), r.score >= 1 ? "ok" : "bad", r.score);
      }
      h += "</table></details>\n";
    }
  }

  h += "<script>\n"
       "(function(){var plots=document.querySelectorAll('svg.plot'),ok=0,marks=0,all=0;\n"
       "plots.forEach(function(p){var "
       "r=p.getBoundingClientRect(),m=p.querySelectorAll('.mark'),good=0;\n"
       "m.forEach(function(e){var b=e.getBoundingClientRect();if(b.width>0||b.height>0)good++;});\n"
       "all+=m.length;marks+=good;if(r.width>0&&r.height>0&&good>0)ok++;});\n"
       "document.body.setAttribute('data-plots-total',String(plots.length));\n"
       "document.body.setAttribute('data-plots-rendered',String(ok));\n"
       "document.body.setAttribute('data-marks-total',String(all));\n"
       "document.body.setAttribute('data-marks-rendered',String(marks));})();\n"
       "</script>\n</body></html>\n";
  return h;
}

}  // namespace sieve::eval

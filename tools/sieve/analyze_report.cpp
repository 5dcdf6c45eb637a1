#include "analyze_report.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <sstream>

namespace sieve::cli {
namespace {

using nlohmann::json;

// Mean of the finite values (NaN when there are none).
double finite_mean(const std::vector<double>& v) {
  double s = 0;
  int n = 0;
  for (double x : v) {
    if (std::isfinite(x)) s += x, ++n;
  }
  return n ? s / n : NAN;
}

std::vector<double> finite_only(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v) {
    if (std::isfinite(x)) out.push_back(x);
  }
  return out;
}

// JSON numbers: NaN becomes null.
json num(double x) {
  return std::isfinite(x) ? json(x) : json(nullptr);
}
json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}
double get(const json& v) {
  return v.is_number() ? v.get<double>() : NAN;
}
std::vector<double> get_vec(const json& a) {
  std::vector<double> out;
  for (const json& v : a) out.push_back(get(v));
  return out;
}

std::string fmt(double x, int digits = 3) {
  if (!std::isfinite(x)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}
std::string fmt_g(double x) {
  if (!std::isfinite(x)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---- a small SVG line chart ----

struct Series {
  std::string name;
  std::vector<double> y;  // NaN: a gap
};
struct Chart {
  std::string title, x_label, y_label;
  std::vector<double> x;             // one x per point, shared by every series
  std::vector<std::string> x_ticks;  // a label per x (categorical axis) or empty (numeric)
  bool log_y = false;
  double y_min = NAN, y_max = NAN;  // NaN: from the data
  std::vector<Series> series;
};

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                          "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string svg_chart(const Chart& c) {
  const double W = 720, H = 320, ml = 64, mr = 170, mt = 34, mb = 46;
  const double pw = W - ml - mr, ph = H - mt - mb;
  double lo = c.y_min, hi = c.y_max;
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    double dl = INFINITY, dh = -INFINITY;
    for (const Series& s : c.series) {
      for (double y : s.y) {
        if (!std::isfinite(y) || (c.log_y && y <= 0)) continue;
        dl = std::min(dl, y), dh = std::max(dh, y);
      }
    }
    if (!std::isfinite(dl)) dl = 0, dh = 1;
    if (!std::isfinite(lo)) lo = dl;
    if (!std::isfinite(hi)) hi = dh;
  }
  if (c.log_y) {
    lo = std::floor(std::log10(std::max(lo, 1e-30)));
    hi = std::ceil(std::log10(std::max(hi, 1e-30)));
    if (hi <= lo) hi = lo + 1;
  } else {
    if (hi <= lo) hi = lo + 1;
    // Round the range out to a 1/2/5 step so that the ticks read well.
    const double raw = (hi - lo) / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw / mag <= 1   ? mag
                        : raw / mag <= 2 ? 2 * mag
                        : raw / mag <= 5 ? 5 * mag
                                         : 10 * mag;
    lo = std::floor(lo / step + 1e-9) * step;
    hi = std::ceil(hi / step - 1e-9) * step;
  }
  const bool categorical = !c.x_ticks.empty();
  double x_lo = 0, x_hi = 1;
  if (categorical) {
    x_lo = -0.5, x_hi = static_cast<double>(c.x.size()) - 0.5;
  } else if (!c.x.empty()) {
    x_lo = *std::min_element(c.x.begin(), c.x.end());
    x_hi = *std::max_element(c.x.begin(), c.x.end());
    if (x_hi <= x_lo) x_hi = x_lo + 1;
  }
  auto px = [&](size_t i) {
    const double xv = categorical ? static_cast<double>(i) : c.x[i];
    return ml + (xv - x_lo) / (x_hi - x_lo) * pw;
  };
  auto py = [&](double y) {
    const double v = c.log_y ? std::log10(y) : y;
    return mt + ph - (v - lo) / (hi - lo) * ph;
  };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' viewBox='0 0 " << W << ' ' << H << "' font-family='sans-serif' font-size='11'>\n";
  o << "<text x='" << ml << "' y='18' font-size='13' font-weight='bold'>" << escape(c.title)
    << "</text>\n";
  o << "<rect x='" << ml << "' y='" << mt << "' width='" << pw << "' height='" << ph
    << "' fill='none' stroke='#888'/>\n";
  // y ticks
  int n_yt = static_cast<int>(hi - lo);  // log: one tick per decade
  if (!c.log_y) {
    const double raw = (hi - lo) / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw / mag <= 1   ? mag
                        : raw / mag <= 2 ? 2 * mag
                        : raw / mag <= 5 ? 5 * mag
                                         : 10 * mag;
    n_yt = std::max(1, static_cast<int>(std::lround((hi - lo) / step)));
  }
  for (int t = 0; t <= n_yt; ++t) {
    const double v = lo + (hi - lo) * t / n_yt;
    const double y = mt + ph - (v - lo) / (hi - lo) * ph;
    o << "<line x1='" << ml << "' x2='" << ml + pw << "' y1='" << y << "' y2='" << y
      << "' stroke='#eee'/>\n";
    const std::string label =
        c.log_y ? "1e" + std::to_string(static_cast<int>(std::lround(v))) : fmt_g(v);
    o << "<text x='" << ml - 6 << "' y='" << y + 4 << "' text-anchor='end'>" << label
      << "</text>\n";
  }
  // x ticks: every category, or about 10 numeric ticks on the data's x values
  const size_t step = categorical ? 1 : std::max<size_t>(1, c.x.size() / 10);
  for (size_t i = 0; i < c.x.size(); i += step) {
    const std::string label = categorical ? c.x_ticks[i] : fmt_g(c.x[i]);
    o << "<text x='" << px(i) << "' y='" << mt + ph + 16 << "' text-anchor='middle'>"
      << escape(label) << "</text>\n";
  }
  o << "<text x='" << ml + pw / 2 << "' y='" << H - 8 << "' text-anchor='middle'>"
    << escape(c.x_label) << "</text>\n";
  o << "<text transform='translate(14," << mt + ph / 2 << ") rotate(-90)' text-anchor='middle'>"
    << escape(c.y_label) << "</text>\n";
  for (size_t s = 0; s < c.series.size(); ++s) {
    const Series& se = c.series[s];
    const char* color = kPalette[s % std::size(kPalette)];
    std::string path;
    bool pen = false;
    for (size_t i = 0; i < se.y.size() && i < c.x.size(); ++i) {
      const double y = se.y[i];
      if (!std::isfinite(y) || (c.log_y && y <= 0)) {
        pen = false;
        continue;
      }
      char buf[64];
      std::snprintf(buf, sizeof buf, "%c%.1f %.1f ", pen ? 'L' : 'M', px(i), py(y));
      path += buf;
      pen = true;
      o << "<circle cx='" << px(i) << "' cy='" << py(y) << "' r='2' fill='" << color << "'/>\n";
    }
    if (!path.empty()) {
      o << "<path d='" << path << "' fill='none' stroke='" << color << "' stroke-width='1.6'"
        << (s >= std::size(kPalette) ? " stroke-dasharray='4 3'" : "") << "/>\n";
    }
    const double ly = mt + 8 + 16.0 * s;
    o << "<line x1='" << ml + pw + 12 << "' x2='" << ml + pw + 32 << "' y1='" << ly << "' y2='"
      << ly << "' stroke='" << color << "' stroke-width='2'/>\n";
    o << "<text x='" << ml + pw + 38 << "' y='" << ly + 4 << "'>" << escape(se.name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::vector<double> layer_x(const json& j) {
  std::vector<double> x;
  for (const json& l : j["layers"]) x.push_back(l.get<double>());
  return x;
}

// The top-p budget block of the JSON for one key range (middle: the middle keys) and mass i.
json top_p_block(const AnalyzeRun& r, bool middle, size_t i) {
  const size_t n_q = r.cells.size(), n_l = r.layers.size(), n_m = r.masses.size();
  const int32_t H = r.n_head;
  const bool with_plan = !r.retrieval.empty();
  auto value = [&](size_t q, size_t l, int32_t h) {
    const std::vector<int32_t>& v = middle ? r.cells[q][l].top_p_mid : r.cells[q][l].top_p_all;
    const int32_t c = v[static_cast<size_t>(h) * n_m + i];
    return c < 0 ? NAN : static_cast<double>(c);
  };
  std::vector<double> keys(n_q);  // keys each query's budget was counted over
  for (size_t q = 0; q < n_q; ++q) {
    const int32_t n = r.query_positions[q] + 1;
    const auto [c0, c1] = middle_keys(n, r.exclude_sinks, r.exclude_window);
    keys[q] = !middle ? static_cast<double>(n) : c1 > c0 ? static_cast<double>(c1 - c0) : NAN;
  }
  // Queries [q0, q1): per (layer, head) the mean over them, then mean and median over layers x
  // heads (and over the retrieval heads alone).
  auto summary = [&](size_t q0, size_t q1) -> json {
    if (q1 <= q0) return nullptr;
    std::vector<double> every, retr;
    const std::vector<double> k(keys.begin() + q0, keys.begin() + q1);
    for (size_t l = 0; l < n_l; ++l) {
      for (int32_t h = 0; h < H; ++h) {
        std::vector<double> v;
        for (size_t q = q0; q < q1; ++q) v.push_back(value(q, l, h));
        const double m = finite_mean(v);
        if (!std::isfinite(m)) continue;
        every.push_back(m);
        if (with_plan && r.retrieval[l * H + h]) retr.push_back(m);
      }
    }
    json s = {{"keys", num(finite_mean(k))},
              {"mean", num(every.empty() ? NAN : finite_mean(every))},
              {"median", num(every.empty() ? NAN : median(every))}};
    s["retrieval"] = with_plan ? json{{"mean", num(retr.empty() ? NAN : finite_mean(retr))},
                                      {"median", num(retr.empty() ? NAN : median(retr))}}
                               : json(nullptr);
    return s;
  };
  json b = summary(0, n_q);
  if (b.is_null()) b = json::object();
  b["mass"] = r.masses[i];
  b["last_prompt"] = summary(0, std::min<size_t>(1, n_q));
  b["decode"] = summary(1, n_q);
  json pq_mean = json::array(), pq_median = json::array(), pq_rmean = json::array(),
       pq_rmedian = json::array();
  for (size_t q = 0; q < n_q; ++q) {
    const json s = summary(q, q + 1);
    pq_mean.push_back(s["mean"]);
    pq_median.push_back(s["median"]);
    pq_rmean.push_back(with_plan ? s["retrieval"]["mean"] : json(nullptr));
    pq_rmedian.push_back(with_plan ? s["retrieval"]["median"] : json(nullptr));
  }
  b["per_query"] = {{"keys", nums(keys)},
                    {"mean", pq_mean},
                    {"median", pq_median},
                    {"retrieval_mean", pq_rmean},
                    {"retrieval_median", pq_rmedian}};
  std::vector<double> pl(n_l);
  json per_head = json::array();
  for (size_t l = 0; l < n_l; ++l) {
    std::vector<double> heads(H);
    for (int32_t h = 0; h < H; ++h) {
      std::vector<double> v;
      for (size_t q = 0; q < n_q; ++q) v.push_back(value(q, l, h));
      heads[h] = finite_mean(v);
    }
    pl[l] = finite_mean(heads);
    per_head.push_back(nums(heads));
  }
  b["per_layer"] = {{"mean", nums(pl)}, {"per_head", per_head}};
  return b;
}

}  // namespace

json analyze_json(const AnalyzeRun& r) {
  const size_t n_q = r.cells.size(), n_l = r.layers.size(), n_m = r.methods.size();
  const size_t n_b = r.budgets.size(), n_blk = r.blocks.size();
  json j;
  j["model"] = r.model;
  j["arch"] = r.arch;
  j["n_layer"] = r.n_layer;
  j["n_head"] = r.n_head;
  j["n_head_kv"] = r.n_head_kv;
  j["head_dim"] = r.head_dim;
  j["n_ctx"] = r.n_ctx;
  j["threads"] = r.threads;
  j["layers"] = r.layers;
  j["prompt_tokens"] = r.prompt_tokens;
  j["decode_steps"] = r.decode_steps;
  j["query_positions"] = r.query_positions;
  j["notes"] = r.notes;

  // Recall of the attention mass.
  json rec;
  json names = json::array();
  for (AnalysisMethod m : r.methods) names.push_back(std::string(method_name(m)));
  rec["methods"] = names;
  rec["sketch_dim"] = r.sketch_dim;
  rec["quest_block"] = r.quest_block;
  rec["h2o_history_prompt_queries"] = r.h2o_history;
  rec["budgets"] = json::array();
  for (size_t b = 0; b < n_b; ++b) {
    const BudgetSplit& s = r.budgets[b];
    json jb = {{"requested", r.budget_requested[b]},
               {"budget", s.budget},
               {"sinks", s.sinks},
               {"top_k", s.top_k},
               {"local", s.local}};
    json mean = json::object(), per_layer = json::object(), per_query = json::object();
    for (size_t m = 0; m < n_m; ++m) {
      const std::string name(method_name(r.methods[m]));
      std::vector<double> all, pl(n_l), pq(n_q);
      for (size_t l = 0; l < n_l; ++l) {
        std::vector<double> v;
        for (size_t q = 0; q < n_q; ++q) v.push_back(r.cells[q][l].recall[b * n_m + m]);
        pl[l] = finite_mean(v);
        all.insert(all.end(), v.begin(), v.end());
      }
      for (size_t q = 0; q < n_q; ++q) {
        std::vector<double> v;
        for (size_t l = 0; l < n_l; ++l) v.push_back(r.cells[q][l].recall[b * n_m + m]);
        pq[q] = finite_mean(v);
      }
      mean[name] = num(finite_mean(all));
      per_layer[name] = nums(pl);
      per_query[name] = nums(pq);
    }
    jb["mean"] = mean;
    jb["per_layer"] = per_layer;
    jb["per_query"] = per_query;
    rec["budgets"].push_back(jb);
  }
  j["recall"] = rec;

  // recall@k against block size.
  json br;
  br["k"] = r.recall_k;
  br["blocks"] = r.blocks;
  std::vector<double> mean(n_blk), lo(n_blk, INFINITY), hi(n_blk, -INFINITY);
  json per_layer = json::array();
  for (size_t l = 0; l < n_l; ++l) {
    std::vector<double> row(n_blk);
    for (size_t k = 0; k < n_blk; ++k) {
      std::vector<double> v;
      for (size_t q = 0; q < n_q; ++q) v.push_back(r.cells[q][l].block_recall[k]);
      row[k] = finite_mean(v);
      lo[k] = std::min(lo[k], row[k]);
      hi[k] = std::max(hi[k], row[k]);
    }
    per_layer.push_back(nums(row));
  }
  for (size_t k = 0; k < n_blk; ++k) {
    std::vector<double> v;
    for (size_t l = 0; l < n_l; ++l) v.push_back(get(per_layer[l][k]));
    mean[k] = finite_mean(v);
  }
  br["mean"] = nums(mean);
  br["min_layer"] = nums(lo);
  br["max_layer"] = nums(hi);
  br["per_layer"] = per_layer;
  j["block_recall"] = br;

  // Consecutive decode queries.
  json dc;
  dc["pairs"] = n_q > 0 ? n_q - 1 : 0;
  dc["theta"] = r.theta;
  auto cos_block = [&](double AnalyzeCell::*field, bool with_theta) {
    json c;
    std::vector<double> all, pl(n_l);
    for (size_t l = 0; l < n_l; ++l) {
      std::vector<double> v;
      for (size_t q = 0; q < n_q; ++q) v.push_back(r.cells[q][l].*field);
      pl[l] = finite_mean(v);
      for (double x : finite_only(v)) all.push_back(x);
    }
    c["median"] = num(all.empty() ? NAN : median(all));
    c["mean"] = num(finite_mean(all));
    c["min"] = num(all.empty() ? NAN : *std::min_element(all.begin(), all.end()));
    c["per_layer"] = nums(pl);
    if (with_theta) {
      const auto hits =
          std::count_if(all.begin(), all.end(), [&](double x) { return x >= r.theta; });
      c["at_least_theta"] = num(all.empty() ? NAN : static_cast<double>(hits) / all.size());
    }
    return c;
  };
  dc["raw"] = cos_block(&AnalyzeCell::cos_raw, false);
  dc["rotated"] = cos_block(&AnalyzeCell::cos_rotated, false);
  dc["fingerprint"] = cos_block(&AnalyzeCell::cos_fingerprint, true);
  j["decode_cosine"] = dc;

  // Per-head logit norms: per head the mean over queries, then the spread across heads.
  json ln;
  std::vector<double> l_min(n_l), l_med(n_l), l_max(n_l), every, ratios;
  json per_head = json::array();
  for (size_t l = 0; l < n_l; ++l) {
    std::vector<double> heads(r.n_head, 0.0);
    for (int32_t h = 0; h < r.n_head; ++h) {
      std::vector<double> v;
      for (size_t q = 0; q < n_q; ++q) v.push_back(r.cells[q][l].logit_l1[h]);
      heads[h] = finite_mean(v);
    }
    per_head.push_back(nums(heads));
    l_min[l] = *std::min_element(heads.begin(), heads.end());
    l_max[l] = *std::max_element(heads.begin(), heads.end());
    l_med[l] = median(heads);
    if (l_min[l] > 0) ratios.push_back(l_max[l] / l_min[l]);
    every.insert(every.end(), heads.begin(), heads.end());
  }
  ln["per_layer"] = {{"min", nums(l_min)}, {"median", nums(l_med)}, {"max", nums(l_max)}};
  ln["per_head"] = per_head;
  const double e_min = every.empty() ? NAN : *std::min_element(every.begin(), every.end());
  const double e_max = every.empty() ? NAN : *std::max_element(every.begin(), every.end());
  ln["min"] = num(e_min);
  ln["median"] = num(every.empty() ? NAN : median(every));
  ln["max"] = num(e_max);
  ln["max_over_min"] = num(e_min > 0 ? e_max / e_min : NAN);
  ln["median_layer_max_over_min"] = num(ratios.empty() ? NAN : median(ratios));
  j["logit_l1"] = ln;

  // Top-p budget of the true attention.
  if (!r.masses.empty()) {
    json tp;
    tp["masses"] = r.masses;
    tp["exclude_sinks"] = r.exclude_sinks;
    tp["exclude_window"] = r.exclude_window;
    tp["head_plan"] = r.head_plan.empty() ? json(nullptr) : json(r.head_plan);
    if (r.retrieval.empty()) {
      tp["retrieval_heads"] = nullptr;
    } else {
      tp["retrieval_heads"] = std::count(r.retrieval.begin(), r.retrieval.end(), uint8_t{1});
      json per_layer = json::array();
      for (size_t l = 0; l < n_l; ++l) {
        json heads = json::array();
        for (int32_t h = 0; h < r.n_head; ++h) {
          if (r.retrieval[l * r.n_head + h]) heads.push_back(h);
        }
        per_layer.push_back(heads);
      }
      tp["retrieval_per_layer"] = per_layer;
    }
    tp["all_keys"] = json::array();
    tp["middle_keys"] = json::array();
    for (size_t i = 0; i < r.masses.size(); ++i) {
      tp["all_keys"].push_back(top_p_block(r, false, i));
      tp["middle_keys"].push_back(top_p_block(r, true, i));
    }
    j["top_p"] = tp;
  }

  j["timing_ms"] = {
      {"prefill", r.prefill_ms}, {"decode", r.decode_ms}, {"analysis", r.analysis_ms}};
  return j;
}

std::string analyze_html(const json& j) {
  std::ostringstream o;
  const std::vector<double> lx = layer_x(j);
  o << "<!doctype html>\n<html><head><meta charset='utf-8'><title>sieve analyze</title>\n"
    << "<style>body{font-family:sans-serif;max-width:980px;margin:24px auto;color:#222}"
    << "table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px "
       "8px;"
    << "text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}"
    << "h2{margin-top:28px}p.note{color:#555;font-size:13px}</style></head><body>\n";
  o << "<h1>sieve analyze</h1>\n<p>" << escape(j["model"].get<std::string>()) << " ("
    << escape(j["arch"].get<std::string>()) << "): " << j["prompt_tokens"].get<int>()
    << " prompt tokens, " << j["decode_steps"].get<int>() << " greedy decode steps; "
    << j["layers"].size() << " of " << j["n_layer"].get<int>()
    << " layers analysed (full attention); " << j["n_head"].get<int>() << " query heads, "
    << j["n_head_kv"].get<int>() << " KV heads, head dim " << j["head_dim"].get<int>() << ".</p>\n";
  for (const json& n : j["notes"])
    o << "<p class='note'>" << escape(n.get<std::string>()) << "</p>\n";

  // Recall tables and plots.
  const json& rec = j["recall"];
  o << "<h2>Recall of the true attention mass at equal budget</h2>\n"
    << "<p class='note'>Mean over heads of the attention mass (softmax over all keys) that each "
       "method's key set holds; mean over layers and queries. Sinks and window are part of the "
       "budget.</p>\n<table><tr><th>method</th>";
  for (const json& b : rec["budgets"]) {
    o << "<th>B=" << b["budget"].get<int>() << " (" << b["sinks"].get<int>() << "+"
      << b["top_k"].get<int>() << "+" << b["local"].get<int>() << ")</th>";
  }
  o << "</tr>\n";
  for (const json& m : rec["methods"]) {
    const std::string name = m.get<std::string>();
    o << "<tr><td>" << escape(name) << "</td>";
    for (const json& b : rec["budgets"]) o << "<td>" << fmt(get(b["mean"][name])) << "</td>";
    o << "</tr>\n";
  }
  o << "</table>\n";
  for (const json& b : rec["budgets"]) {
    Chart c;
    c.title = "Recall vs layer, budget " + std::to_string(b["budget"].get<int>());
    c.x_label = "layer";
    c.y_label = "attention mass recalled";
    c.x = lx;
    c.y_max = 1.0;
    for (const json& m : rec["methods"]) {
      const std::string name = m.get<std::string>();
      c.series.push_back({name, get_vec(b["per_layer"][name])});
    }
    o << svg_chart(c);
  }

  // Block granularity.
  const json& br = j["block_recall"];
  o << "<h2>Recall@k against block size</h2>\n<p class='note'>Critical set: the top-"
    << br["k"].get<int>()
    << " keys by true attention summed over heads. Blocks ranked by their summed attention are "
       "taken until k keys; recall = |taken &cap; critical| / k (TokenSelect's granularity "
       "figure).</p>\n<table><tr><th>block</th>";
  for (const json& b : br["blocks"]) o << "<th>" << b.get<int>() << "</th>";
  o << "</tr>\n<tr><td>mean over layers</td>";
  for (const json& v : br["mean"]) o << "<td>" << fmt(get(v)) << "</td>";
  o << "</tr>\n<tr><td>worst layer</td>";
  for (const json& v : br["min_layer"]) o << "<td>" << fmt(get(v)) << "</td>";
  o << "</tr></table>\n";
  {
    Chart c;
    c.title = "Recall@" + std::to_string(br["k"].get<int>()) + " vs block size";
    c.x_label = "block size (tokens)";
    c.y_label = "recall of the critical set";
    c.y_min = 0, c.y_max = 1;
    for (size_t i = 0; i < br["blocks"].size(); ++i) {
      c.x.push_back(static_cast<double>(i));
      c.x_ticks.push_back(std::to_string(br["blocks"][i].get<int>()));
    }
    c.series.push_back({"mean over layers", get_vec(br["mean"])});
    c.series.push_back({"best layer", get_vec(br["max_layer"])});
    c.series.push_back({"worst layer", get_vec(br["min_layer"])});
    o << svg_chart(c);
  }

  // Consecutive queries.
  const json& dc = j["decode_cosine"];
  o << "<h2>Cosine similarity of consecutive decode queries</h2>\n<p class='note'>"
    << dc["pairs"].get<int>()
    << " consecutive pairs per layer. raw: post-RoPE queries, mean over heads; rotated: each "
       "query rotated back to position 0; fingerprint: the selection cache's fingerprint (mean "
       "over heads of the rotated query). Median raw "
    << fmt(get(dc["raw"]["median"])) << ", rotated " << fmt(get(dc["rotated"]["median"]))
    << ", fingerprint " << fmt(get(dc["fingerprint"]["median"]))
    << "; fingerprint cosine &ge; theta " << fmt(get(dc["theta"]), 2) << " in "
    << fmt(100 * get(dc["fingerprint"]["at_least_theta"]), 1) << "% of pairs.</p>\n";
  {
    Chart c;
    c.title = "Consecutive decode query cosine per layer";
    c.x_label = "layer";
    c.y_label = "cosine";
    c.x = lx;
    c.y_max = 1.0;
    c.series.push_back({"raw", get_vec(dc["raw"]["per_layer"])});
    c.series.push_back({"rotated to 0", get_vec(dc["rotated"]["per_layer"])});
    c.series.push_back({"fingerprint", get_vec(dc["fingerprint"]["per_layer"])});
    o << svg_chart(c);
  }

  // Logit norms.
  const json& ln = j["logit_l1"];
  o << "<h2>Per-head logit norms</h2>\n<p class='note'>L1 norm of the raw q.K logits (no "
       "1/sqrt(d)) over all keys, per head (mean over queries); spread across heads per layer. "
       "All heads: min "
    << fmt_g(get(ln["min"])) << ", median " << fmt_g(get(ln["median"])) << ", max "
    << fmt_g(get(ln["max"])) << " (max/min " << fmt_g(get(ln["max_over_min"]))
    << "; median within-layer max/min " << fmt_g(get(ln["median_layer_max_over_min"]))
    << ").</p>\n";
  {
    Chart c;
    c.title = "Logit L1 norm across heads per layer";
    c.x_label = "layer";
    c.y_label = "L1 norm of q.K (log)";
    c.x = lx;
    c.log_y = true;
    c.series.push_back({"max head", get_vec(ln["per_layer"]["max"])});
    c.series.push_back({"median head", get_vec(ln["per_layer"]["median"])});
    c.series.push_back({"min head", get_vec(ln["per_layer"]["min"])});
    o << svg_chart(c);
  }
  // Top-p budget.
  if (j.contains("top_p")) {
    const json& tp = j["top_p"];
    const bool plan = !tp["head_plan"].is_null();
    o << "<h2>Top-p budget of the true attention</h2>\n<p class='note'>The fewest keys whose true "
         "attention (softmax of q.K) sums to at least p, per query head; mean and median over "
         "layers x "
         "heads of each head's mean over the queries. Middle keys: all but the first "
      << tp["exclude_sinks"].get<int>() << " and the last " << tp["exclude_window"].get<int>()
      << ", the mass renormalised over them."
      << (plan ? " Retrieval heads: " + std::to_string(tp["retrieval_heads"].get<int>()) +
                     " of the head plan " + escape(tp["head_plan"].get<std::string>()) + "."
               : std::string())
      << "</p>\n<table><tr><th>keys</th><th>p</th><th>mean</th><th>median</th>"
      << (plan ? "<th>retrieval mean</th><th>retrieval median</th>" : "")
      << "<th>last prompt token, mean</th><th>decode, mean</th><th>keys considered</th></tr>\n";
    for (const char* range : {"all_keys", "middle_keys"}) {
      for (const json& b : tp[range]) {
        o << "<tr><td>" << (std::string(range) == "all_keys" ? "all" : "middle") << "</td><td>"
          << fmt(get(b["mass"]), 2) << "</td><td>" << fmt(get(b["mean"]), 1) << "</td><td>"
          << fmt(get(b["median"]), 1) << "</td>";
        if (plan) {
          o << "<td>" << fmt(get(b["retrieval"]["mean"]), 1) << "</td><td>"
            << fmt(get(b["retrieval"]["median"]), 1) << "</td>";
        }
        o << "<td>" << (b["last_prompt"].is_null() ? "-" : fmt(get(b["last_prompt"]["mean"]), 1))
          << "</td><td>" << (b["decode"].is_null() ? "-" : fmt(get(b["decode"]["mean"]), 1))
          << "</td><td>" << fmt(get(b["keys"]), 0) << "</td></tr>\n";
      }
    }
    o << "</table>\n";
    Chart c;
    c.title = "Top-p budget per layer (mean over heads and queries)";
    c.x_label = "layer";
    c.y_label = "keys (log)";
    c.x = lx;
    c.log_y = true;
    for (const char* range : {"all_keys", "middle_keys"}) {
      for (const json& b : tp[range]) {
        c.series.push_back({std::string(std::string(range) == "all_keys" ? "all" : "middle") +
                                " p=" + fmt(get(b["mass"]), 2),
                            get_vec(b["per_layer"]["mean"])});
      }
    }
    o << svg_chart(c);
  }

  const json& t = j["timing_ms"];
  o << "<p class='note'>prefill " << fmt(get(t["prefill"]) / 1000, 1) << " s, decode "
    << fmt(get(t["decode"]) / 1000, 1) << " s, of which analysis "
    << fmt(get(t["analysis"]) / 1000, 1) << " s; " << j["threads"].get<int>()
    << " threads.</p>\n</body></html>\n";
  return o.str();
}

std::string analyze_text(const json& j) {
  std::ostringstream o;
  o << "analysed " << j["layers"].size() << " full-attention layers x "
    << j["query_positions"].size() << " queries (prompt " << j["prompt_tokens"].get<int>()
    << " tokens + " << j["decode_steps"].get<int>() << " decode steps)\n";
  for (const json& n : j["notes"]) o << "note: " << n.get<std::string>() << "\n";
  const json& rec = j["recall"];
  o << "recall of attention mass (mean over layers and queries):\n  ";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%-18s", "method");
  o << buf;
  for (const json& b : rec["budgets"]) {
    std::snprintf(buf, sizeof buf, " B=%-6d", b["budget"].get<int>());
    o << buf;
  }
  o << "\n";
  for (const json& m : rec["methods"]) {
    const std::string name = m.get<std::string>();
    std::snprintf(buf, sizeof buf, "  %-18s", name.c_str());
    o << buf;
    for (const json& b : rec["budgets"]) {
      std::snprintf(buf, sizeof buf, " %-8s", fmt(get(b["mean"][name])).c_str());
      o << buf;
    }
    o << "\n";
  }
  const json& br = j["block_recall"];
  o << "recall@" << br["k"].get<int>() << " by block size:";
  for (size_t i = 0; i < br["blocks"].size(); ++i) {
    o << " " << br["blocks"][i].get<int>() << ":" << fmt(get(br["mean"][i]));
  }
  o << "\n";
  const json& dc = j["decode_cosine"];
  o << "consecutive decode query cosine, median: raw " << fmt(get(dc["raw"]["median"]))
    << ", rotated " << fmt(get(dc["rotated"]["median"])) << ", fingerprint "
    << fmt(get(dc["fingerprint"]["median"])) << " (>= " << fmt(get(dc["theta"]), 2) << " in "
    << fmt(100 * get(dc["fingerprint"]["at_least_theta"]), 1) << "% of pairs)\n";
  const json& ln = j["logit_l1"];
  o << "logit L1 norm per head: min " << fmt_g(get(ln["min"])) << ", median "
    << fmt_g(get(ln["median"])) << ", max " << fmt_g(get(ln["max"])) << " (max/min "
    << fmt_g(get(ln["max_over_min"])) << ", median within a layer "
    << fmt_g(get(ln["median_layer_max_over_min"])) << ")\n";
  if (j.contains("top_p")) {
    const json& tp = j["top_p"];
    o << "top-p budget of the true attention (keys; mean / median over layers x heads"
      << (tp["head_plan"].is_null() ? "" : "; retrieval heads") << "):\n";
    for (const char* range : {"all_keys", "middle_keys"}) {
      for (const json& b : tp[range]) {
        o << "  " << (std::string(range) == "all_keys" ? "all keys   " : "middle keys")
          << " p=" << fmt(get(b["mass"]), 2) << ": " << fmt(get(b["mean"]), 1) << " / "
          << fmt(get(b["median"]), 1);
        if (!tp["head_plan"].is_null()) {
          o << "; retrieval " << fmt(get(b["retrieval"]["mean"]), 1) << " / "
            << fmt(get(b["retrieval"]["median"]), 1);
        }
        o << " of " << fmt(get(b["keys"]), 0) << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace sieve::cli

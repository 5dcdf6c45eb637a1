#include "eval/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sieve::eval {
namespace {

std::string fmt_num(double v) {
  if (std::fabs(v) >= 1000 || v == std::round(v)) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

std::string ctx_label(double x) {
  const auto v = static_cast<long long>(std::llround(x));
  if (v >= 1024 && v % 1024 == 0) return fmt::format("{}K", v / 1024);
  return fmt::format("{}", v);
}

// "Nice" tick values covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> t;
  if (!(hi > lo)) {
    t.push_back(lo);
    return t;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
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
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

const char* series_color(size_t i) {
  static const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                  "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return palette[i % (sizeof palette / sizeof palette[0])];
}

std::string score_color(double v) {
  v = std::clamp(v, 0.0, 100.0) / 100.0;
  // Two linear segments: red (0) -> amber (0.5) -> green (1).
  const double r0[3] = {214, 39, 40}, r1[3] = {250, 190, 60}, r2[3] = {44, 160, 44};
  double c[3];
  for (int i = 0; i < 3; ++i) {
    c[i] =
        v < 0.5 ? r0[i] + (r1[i] - r0[i]) * (v / 0.5) : r1[i] + (r2[i] - r1[i]) * ((v - 0.5) / 0.5);
  }
  return fmt::format("#{:02x}{:02x}{:02x}", static_cast<int>(c[0]), static_cast<int>(c[1]),
                     static_cast<int>(c[2]));
}

std::string svg_line_chart(const LineChart& c) {
  // Size and margins (the legend sits on the right of full-size charts).
  const double k_w = c.compact ? 330 : 560, k_h = c.compact ? 220 : 320;
  const double k_left = 64, k_right = c.compact ? 16 : 150, k_top = 36, k_bottom = 48;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  std::vector<double> xs = c.x_domain;
  bool any_point = false;
  for (const Series& s : c.series) {
    for (auto [x, y] : s.points) {
      any_point = true;
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
      if (std::find(xs.begin(), xs.end(), x) == xs.end()) xs.push_back(x);
    }
  }
  std::sort(xs.begin(), xs.end());
  if (!xs.empty()) {
    x_lo = xs.front();
    x_hi = xs.back();
  }
  if (!any_point) y_lo = y_hi = 0;
  const bool empty = !any_point;
  if (xs.empty()) x_lo = x_hi = 0;
  if (!std::isnan(c.y_min)) y_lo = c.y_min;
  if (!std::isnan(c.y_max)) y_hi = c.y_max;
  if (std::isnan(c.y_min) && y_lo > 0) y_lo = 0;  // rates and fractions read best from zero
  if (!(y_hi > y_lo)) y_hi = y_lo + 1;
  if (std::isnan(c.y_max)) {  // end the axis on a tick above the highest point
    const std::vector<double> t = nice_ticks(y_lo, y_hi, 5);
    if (t.size() >= 2 && t.back() < y_hi) y_hi = t.back() + (t[1] - t[0]);
  }
  const auto fx = [&](double x) {
    if (c.log2_x && x_lo > 0) x = std::log2(x);
    const double lo = c.log2_x && x_lo > 0 ? std::log2(x_lo) : x_lo;
    const double hi = c.log2_x && x_hi > 0 ? std::log2(x_hi) : x_hi;
    const double plot_w = k_w - k_left - k_right;
    if (!(hi > lo)) return k_left + plot_w / 2;
    return k_left + (x - lo) / (hi - lo) * plot_w;
  };
  const auto fy = [&](double y) {
    const double plot_h = k_h - k_top - k_bottom;
    return k_top + (1.0 - (y - y_lo) / (y_hi - y_lo)) * plot_h;
  };

  std::string s = fmt::format(
      "<svg class=\"plot\" id=\"{}\" data-kind=\"line\" xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
      xml_escape(c.id), k_w, k_h, k_w, k_h, xml_escape(c.title));
  s += fmt::format("<text x=\"{}\" y=\"20\" class=\"title\">{}</text>\n", k_left,
                   xml_escape(c.title));
  // Axes, grid and ticks.
  const double x0 = k_left, x1 = k_w - k_right, y0 = k_h - k_bottom, y1 = k_top;
  for (double t : nice_ticks(y_lo, y_hi, 5)) {
    s += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>\n",
        x0, fy(t), x1, fy(t), x0 - 6, fy(t) + 4, fmt_num(t));
  }
  for (double x : xs) {
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">{}</text>\n", fx(x),
        y0 + 16, ctx_label(x));
  }
  s += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"axis\"/>"
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{3}\" class=\"axis\"/>\n",
      x0, y0, x1, y1);
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"label\" text-anchor=\"middle\">{}</text>\n",
      (x0 + x1) / 2, k_h - 10, xml_escape(c.x_label));
  s += fmt::format(
      "<text transform=\"translate(16 {:.1f}) rotate(-90)\" class=\"label\" "
      "text-anchor=\"middle\">{}</text>\n",
      (y0 + y1) / 2, xml_escape(c.y_label));
  if (empty) {
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"label\" text-anchor=\"middle\">no data</text>\n",
        (x0 + x1) / 2, (y0 + y1) / 2);
  }
  // Series: a polyline plus one marker per point, and a legend entry.
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& se = c.series[i];
    std::vector<std::pair<double, double>> pts = se.points;
    std::sort(pts.begin(), pts.end());
    const char* col = series_color(i);
    std::string poly;
    for (auto [x, y] : pts) poly += fmt::format("{:.1f},{:.1f} ", fx(x), fy(y));
    if (pts.size() > 1) {
      s += fmt::format(
          "<polyline class=\"series mark\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
          "points=\"{}\"><title>{}</title></polyline>\n",
          col, poly, xml_escape(se.name));
    }
    for (auto [x, y] : pts) {
      s += fmt::format(
          "<circle class=\"point mark\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\">"
          "<title>{} @ {}: {}{}</title></circle>\n",
          fx(x), fy(y), col, xml_escape(se.name), ctx_label(x), fmt_num(y), xml_escape(c.y_unit));
    }
    if (c.compact) continue;
    const double ly = k_top + 8 + 18.0 * static_cast<double>(i);
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>\n",
        x1 + 14, ly - 10, col, x1 + 32, ly, xml_escape(se.name));
  }
  s += "</svg>\n";
  return s;
}

std::string svg_heatmap(const Heatmap& h) {
  const double cell_w = 56, cell_h = 22, left = 70, top = 36, bottom = 46;
  // Wide enough for the title (about 8.5 px per bold character at 14 px) even with few columns.
  const double w = std::max(left + cell_w * static_cast<double>(h.x_labels.size()) + 20,
                            left + 8.5 * static_cast<double>(h.title.size()) + 10);
  const double ht = top + cell_h * static_cast<double>(h.y_labels.size()) + bottom;
  std::string s = fmt::format(
      "<svg class=\"plot\" id=\"{}\" data-kind=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" role=\"img\" "
      "aria-label=\"{}\">\n",
      xml_escape(h.id), w, ht, w, ht, xml_escape(h.title));
  s +=
      fmt::format("<text x=\"{}\" y=\"20\" class=\"title\">{}</text>\n", left, xml_escape(h.title));
  for (size_t r = 0; r < h.y_labels.size(); ++r) {
    const double y = top + cell_h * static_cast<double>(r);
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>\n", left - 6,
        y + cell_h / 2 + 4, xml_escape(h.y_labels[r]));
    for (size_t col = 0; col < h.x_labels.size(); ++col) {
      const double x = left + cell_w * static_cast<double>(col);
      const double v = r < h.values.size() && col < h.values[r].size() ? h.values[r][col] : NAN;
      const int n = r < h.counts.size() && col < h.counts[r].size() ? h.counts[r][col] : 0;
      if (std::isnan(v)) {
        s += fmt::format(
            "<rect class=\"cell empty\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
            "height=\"{:.1f}\" "
            "fill=\"#eeeeee\"/>\n",
            x, y, cell_w - 2, cell_h - 2);
        continue;
      }
      s += fmt::format(
          "<rect class=\"cell mark\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\">"
          "<title>depth {}, {}: {:.0f}% (n={})</title></rect>"
          "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"cellv\" text-anchor=\"middle\">{:.0f}</text>\n",
          x, y, cell_w - 2, cell_h - 2, score_color(v), xml_escape(h.y_labels[r]),
          xml_escape(h.x_labels[col]), v, n, x + cell_w / 2 - 1, y + cell_h / 2 + 4, v);
    }
  }
  for (size_t col = 0; col < h.x_labels.size(); ++col) {
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">{}</text>\n",
        left + cell_w * static_cast<double>(col) + cell_w / 2 - 1,
        top + cell_h * static_cast<double>(h.y_labels.size()) + 14, xml_escape(h.x_labels[col]));
  }
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"label\" text-anchor=\"middle\">{}</text>\n",
      left + cell_w * static_cast<double>(h.x_labels.size()) / 2, ht - 8, xml_escape(h.x_label));
  s += fmt::format(
      "<text transform=\"translate(14 {:.1f}) rotate(-90)\" class=\"label\" "
      "text-anchor=\"middle\">{}</text>\n",
      top + cell_h * static_cast<double>(h.y_labels.size()) / 2, xml_escape(h.y_label));
  s += "</svg>\n";
  return s;
}

}  // namespace sieve::eval

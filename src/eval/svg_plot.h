// Small inline-SVG charts for the HTML report (no scripts, no external files): line charts
// over context length and depth x length heatmaps. Every chart is an <svg class="plot"> whose
// data marks carry class "mark" and a <title> tooltip, which the browser test counts.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sieve::eval {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
};

struct LineChart {
  std::string id, title, x_label, y_label;
  std::vector<Series> series;
  bool log2_x = true;  // context lengths double: equal spacing per doubling
  double y_min = std::numeric_limits<double>::quiet_NaN();  // NaN: from the data
  double y_max = std::numeric_limits<double>::quiet_NaN();
  std::string y_unit;            // appended to tooltip values ("%", " tok/s")
  std::vector<double> x_domain;  // when set: the x ticks and range (shared by small multiples)
  bool compact = false;          // small multiple: smaller, no legend (colours follow series order)
};

struct Heatmap {
  std::string id, title, x_label, y_label;
  std::vector<std::string> x_labels, y_labels;  // columns (lengths), rows (depths, top first)
  std::vector<std::vector<double>> values;      // [row][column], 0..100; NaN = no sample
  std::vector<std::vector<int>> counts;         // samples per cell (tooltips)
};

std::string svg_line_chart(const LineChart& c);
std::string svg_heatmap(const Heatmap& h);

// Text and attribute escaping for XML/HTML.
std::string xml_escape(std::string_view s);

// Series colour i (a fixed palette that stays distinguishable in print).
const char* series_color(size_t i);
// Score colour for 0..100: red -> amber -> green.
std::string score_color(double v);

}  // namespace sieve::eval

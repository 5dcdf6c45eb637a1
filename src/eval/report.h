// Reports of sample records: a markdown summary (tables) and a self-contained HTML page with
// inline-SVG plots (accuracy vs length per policy, depth x length heatmaps per policy, speed
// vs length, selected fraction), plus every sample's answer, output and score.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "eval/records.h"

namespace sieve::eval {

struct ReportMeta {
  std::string title = "Sieve evaluation";
  std::string command;             // the command line that produced the records
  std::string generated_at;        // UTC ISO time
  std::vector<std::string> notes;  // extra lines (n, seed, machine...)
};

std::string markdown_report(std::span<const SampleRecord> records, const ReportMeta& meta);

// The HTML page. It carries a small inline script that, once the browser has laid the page
// out, stamps <body data-plots-total, data-plots-rendered, data-marks-rendered> with how many
// plots and data marks got a non-empty box: a headless browser's DOM dump then shows whether
// the plots rendered. The plots themselves are static SVG and need no script.
std::string html_report(std::span<const SampleRecord> records, const ReportMeta& meta);

}  // namespace sieve::eval

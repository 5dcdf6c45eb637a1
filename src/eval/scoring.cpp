#include "eval/scoring.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

namespace sieve::eval {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Python's str.strip(): whitespace per str.isspace on ASCII (space, \t\n\v\f\r and the
// \x1c-\x1f separators).
bool py_space(unsigned char c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
}

std::string_view py_strip(std::string_view s) {
  while (!s.empty() && py_space(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && py_space(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view metric_name(Metric m) {
  switch (m) {
    case Metric::string_match_all:
      return "string_match_all";
    case Metric::string_match_part:
      return "string_match_part";
    case Metric::first_int_match:
      return "first_int_match";
    case Metric::kv_word_match:
      return "kv_word_match";
  }
  return "?";
}

std::optional<Metric> metric_from_name(std::string_view name) {
  for (Metric m : {Metric::string_match_all, Metric::string_match_part, Metric::first_int_match,
                   Metric::kv_word_match}) {
    if (metric_name(m) == name) return m;
  }
  return std::nullopt;
}

std::string ruler_postprocess(std::string_view pred) {
  std::string s(py_strip(pred));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) <= 0x1f) c = '\n';
  }
  return std::string(py_strip(s));
}

std::string first_int(std::string_view pred) {
  size_t i = 0;
  while (i < pred.size() && !std::isdigit(static_cast<unsigned char>(pred[i]))) ++i;
  size_t j = i;
  while (j < pred.size() && std::isdigit(static_cast<unsigned char>(pred[j]))) ++j;
  return std::string(pred.substr(i, j - i));
}

double score(Metric m, std::string_view prediction, std::span<const std::string> references) {
  if (references.empty()) return 0.0;
  switch (m) {
    case Metric::string_match_all:
    case Metric::string_match_part: {
      const std::string pred = lower(ruler_postprocess(prediction));
      int found = 0;
      for (const std::string& r : references) found += pred.find(lower(r)) != std::string::npos;
      if (m == Metric::string_match_part) return found > 0 ? 1.0 : 0.0;
      return static_cast<double>(found) / static_cast<double>(references.size());
    }
    case Metric::first_int_match:
      // InfiniteBench compares the label with the first integer of the raw prediction.
      return first_int(prediction) == references.front() ? 1.0 : 0.0;
    case Metric::kv_word_match: {
      std::string s(prediction);
      for (char& c : s) {
        if (std::string_view("\n:\"'.,?!{}").find(c) != std::string_view::npos) c = ' ';
      }
      std::istringstream in(s);
      std::string w;
      while (in >> w) {
        if (w == references.front()) return 1.0;
      }
      return 0.0;
    }
  }
  return 0.0;
}

}  // namespace sieve::eval

// Real attention rows captured from SmolLM2 at 8K tokens
// (tests/fixtures/attention_rows_smollm2_8k.txt, written by `sieve calibrate --ctx 8192
// --dump-rows`): one line per row, "layer head n" then n probabilities. The CUDA selection tests
// and bench/cuda use them, tiled to the lengths they need, as realistic score distributions. Host
// code only.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sieve::cuda::test {

// The fixture the CUDA tests and bench/cuda read (path below the source tree).
constexpr const char* k_real_rows_fixture = "tests/fixtures/attention_rows_smollm2_8k.txt";

struct real_row {
  int layer = 0, head = 0;
  std::vector<float> p;
};

// Reads a fixture by its path below the source tree: $SIEVE_SOURCE_DIR, the directory the
// tests were built from, then the working directory and its parents (the GPU machine runs a
// copy of the tree from its root). Empty when not found or malformed.
inline std::vector<real_row> load_real_rows(const std::string& rel) {
  std::vector<std::string> roots;
  if (const char* e = std::getenv("SIEVE_SOURCE_DIR")) roots.emplace_back(e);
#ifdef SIEVE_SOURCE_DIR
  roots.emplace_back(SIEVE_SOURCE_DIR);
#endif
  for (const char* up : {".", "..", "../..", "../../.."}) roots.emplace_back(up);
  for (const std::string& root : roots) {
    std::ifstream in(root + "/" + rel);
    if (!in) continue;
    std::vector<real_row> rows;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      real_row r;
      int n = 0;
      ls >> r.layer >> r.head >> n;
      r.p.resize(n > 0 ? n : 0);
      for (float& x : r.p) ls >> x;
      if (!ls || n <= 0) return {};
      rows.push_back(std::move(r));
    }
    return rows;
  }
  return {};
}

// n scores: row `which` of rows (cycled), tiled from offset `shift` as often as needed.
inline std::vector<float> tile_real_row(const std::vector<real_row>& rows, size_t which, int n,
                                        size_t shift = 0) {
  const std::vector<float>& src = rows[which % rows.size()].p;
  std::vector<float> v(n > 0 ? n : 0);
  for (size_t i = 0; i < v.size(); ++i) v[i] = src[(i + shift) % src.size()];
  return v;
}

}  // namespace sieve::cuda::test

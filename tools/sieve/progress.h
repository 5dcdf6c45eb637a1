// A progress bar on stderr when it is a terminal (silent otherwise, and when quiet).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace sieve::cli {

class Progress {
 public:
  Progress(std::string label, int64_t total, bool quiet = false);
  ~Progress();
  void add(int64_t n);
  void set(int64_t done);
  void done();

 private:
  void draw(bool force);
  std::string label_;
  int64_t total_, done_ = 0;
  bool enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace sieve::cli

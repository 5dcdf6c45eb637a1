#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace sieve::cli {

Progress::Progress(std::string label, int64_t total, bool quiet)
    : label_(std::move(label)), total_(total), enabled_(!quiet && isatty(2)) {
  start_ = last_ = std::chrono::steady_clock::now();
  draw(true);
}

Progress::~Progress() {
  done();
}

void Progress::add(int64_t n) {
  done_ += n;
  draw(false);
}

void Progress::set(int64_t d) {
  done_ = d;
  draw(false);
}

void Progress::draw(bool force) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double frac = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 0.0;
  const int width = 30, fill = static_cast<int>(frac * width);
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double eta = frac > 0.01 ? secs * (1 - frac) / frac : 0;
  std::string bar(fill, '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r%s [%s] %3d%%  %.0fs left ", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100), eta);
  std::fflush(stderr);
}

void Progress::done() {
  if (!enabled_ || finished_) return;
  done_ = total_;
  draw(true);
  std::fprintf(stderr, "\n");
  finished_ = true;
}

}  // namespace sieve::cli

// Deterministic random numbers for the task generators. Python's random/numpy streams cannot be
// reproduced bit-exactly, so Sieve uses its own: xoshiro256** seeded through SplitMix64, with
// every draw defined here (no std:: distributions, whose output differs between standard
// libraries). The same seed gives the same samples on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sieve::eval {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  // Uniform integer in [lo, hi] (inclusive), without modulo bias.
  int64_t uniform_int(int64_t lo, int64_t hi);
  // Uniform in [0, 1).
  double uniform_double();
  // k distinct values of [0, n) in random order (k <= n).
  std::vector<int64_t> sample(int64_t n, int64_t k);
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(uniform_int(0, static_cast<int64_t>(i) - 1));
      std::swap(v[i - 1], v[j]);
    }
  }
  // A version-4 UUID in canonical lowercase form ("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx").
  std::string uuid4();
  // n random decimal digits (leading zeros possible).
  std::string digits(int n);

 private:
  uint64_t s_[4];
};

// A sample's seed from the run seed and what identifies the sample, so that each sample can
// be generated alone (resuming, or running one task) and come out the same.
uint64_t derive_seed(uint64_t base, std::string_view task, int64_t ctx, int64_t index);

// FNV-1a 64-bit, for short content fingerprints (not security).
uint64_t fnv1a64(std::string_view data, uint64_t h = 0xcbf29ce484222325ull);

}  // namespace sieve::eval

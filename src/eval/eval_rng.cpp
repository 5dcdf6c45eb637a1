#include "eval/eval_rng.h"

#include <unordered_set>

namespace sieve::eval {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;  // 0 means the full 2^64
  if (range == 0) return static_cast<int64_t>(next_u64());
  // Rejection: accept only draws below the largest multiple of range.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return lo + static_cast<int64_t>(x % range);
}

double Rng::uniform_double() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

std::vector<int64_t> Rng::sample(int64_t n, int64_t k) {
  std::vector<int64_t> out;
  if (k <= 0 || n <= 0) return out;
  if (k > n) k = n;
  out.reserve(static_cast<size_t>(k));
  if (k * 4 >= n) {  // dense: partial Fisher-Yates over the whole range
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = uniform_int(i, n - 1);
      std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(j)]);
      out.push_back(all[static_cast<size_t>(i)]);
    }
    return out;
  }
  std::unordered_set<int64_t> seen;  // sparse: rejection
  while (static_cast<int64_t>(out.size()) < k) {
    const int64_t v = uniform_int(0, n - 1);
    if (seen.insert(v).second) out.push_back(v);
  }
  return out;
}

std::string Rng::uuid4() {
  uint64_t hi = next_u64(), lo = next_u64();
  hi = (hi & ~0xF000ull) | 0x4000ull;                  // version 4
  lo = (lo & ~(0xC000ull << 48)) | (0x8000ull << 48);  // variant 10xx
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (int i = 0; i < 32; ++i) {
    const uint64_t word = i < 16 ? hi : lo;
    const int shift = 60 - 4 * (i % 16);
    s += hex[(word >> shift) & 0xF];
    if (i == 7 || i == 11 || i == 15 || i == 19) s += '-';
  }
  return s;
}

std::string Rng::digits(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>('0' + uniform_int(0, 9));
  return s;
}

uint64_t fnv1a64(std::string_view data, uint64_t h) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t derive_seed(uint64_t base, std::string_view task, int64_t ctx, int64_t index) {
  uint64_t x = base ^ fnv1a64(task);
  uint64_t a = splitmix64(x);
  x = a ^ static_cast<uint64_t>(ctx);
  a = splitmix64(x);
  x = a ^ static_cast<uint64_t>(index);
  return splitmix64(x);
}

}  // namespace sieve::eval

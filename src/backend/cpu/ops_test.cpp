// RopeRotator: rotating a vector already at position a by offset b equals RoPE at a + b,
// for both pair layouts, negative offsets and positions far beyond a million.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/ops.h"

namespace sieve {
namespace {

// d 64: the AVX2 path where the CPU has it (pairs in groups of 8); d 20: the scalar path.
void check_offset_rotation(int d) {
  const int heads = 3;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (RopeMode mode : {RopeMode::norm, RopeMode::neox}) {
    RopeRotator rot(d, d, 10000.0f, mode);
    rot.reserve(3'000'000);
    const int32_t cases[][2] = {{0, 5}, {100, -100}, {7000, 1234}, {1'500'000, -1'499'000}, {3, 2'000'000}};
    for (const auto& c : cases) {
      std::vector<float> x(heads * d);
      for (float& v : x) v = nd(rng);
      std::vector<float> a = x, b = x;
      const int32_t pa = c[0], sum = c[0] + c[1];
      rope(a.data(), &pa, 1, heads, d, d, 10000.0f, mode);
      rot.rotate(a.data(), heads, c[1]);
      rope(b.data(), &sum, 1, heads, d, d, 10000.0f, mode);
      for (int i = 0; i < heads * d; ++i) {
        EXPECT_NEAR(a[i], b[i], 2e-4f) << "d " << d << " pos " << pa << " offset " << c[1] << " i " << i;
      }
    }
  }
}

TEST(RopeRotator, OffsetRotationEqualsRopeAtTheSum) {
  check_offset_rotation(64);
  check_offset_rotation(128);
  check_offset_rotation(20);
}

}  // namespace
}  // namespace sieve

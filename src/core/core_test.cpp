#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/huge_buffer.h"
#include "core/result.h"
#include "core/thread_pool.h"

namespace sieve {
namespace {

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp16(f), h) << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);            // exactly halfway to inf -> inf
  EXPECT_EQ(f32_to_fp16(1.0f + 0.5f / 1024), 0x3c00);  // tie -> even
  EXPECT_EQ(f32_to_fp16(1.0f + 1.5f / 1024), 0x3c02);
  EXPECT_EQ(fp16_to_f32(0x0001), 5.9604644775390625e-8f);
}

TEST(Bf16, Rounds) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-100, 100);
  for (int i = 0; i < 1000; ++i) {
    float f = d(rng);
    EXPECT_NEAR(bf16_to_f32(f32_to_bf16(f)), f, std::fabs(f) / 128);
  }
}

TEST(GgmlType, Table) {
  EXPECT_EQ(type_info(GgmlType::Q4_K)->type_size, 144);
  EXPECT_EQ(type_info(GgmlType::Q6_K)->type_size, 210);
  EXPECT_EQ(type_info(GgmlType::Q5_0)->type_size, 22);
  EXPECT_EQ(type_info(4), nullptr);
  EXPECT_EQ(type_info(999), nullptr);
  EXPECT_FALSE(type_info(GgmlType::Q2_K)->supported);
  EXPECT_EQ(row_bytes(GgmlType::Q4_1, 576), 18 * 20);
}

TEST(Result, CarriesValueOrError) {
  Result<int> a = 3;
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 3);
  Result<int> b = make_error("bad {} at {}", "field", 12);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.message(), "bad field at 12");
  auto f = [](bool fail) -> Status {
    SIEVE_TRY(fail ? Status(make_error("x")) : Status());
    return {};
  };
  EXPECT_TRUE(f(false).ok());
  EXPECT_FALSE(f(true).ok());
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int nt : {1, 2, 3}) {
    ThreadPool pool(nt);
    for (int64_t n : {0, 1, 5, 97, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
    }
    // many back-to-back jobs (the decode pattern)
    std::atomic<int64_t> sum{0};
    for (int r = 0; r < 500; ++r) pool.run([&](int t, int) { sum += t + 1; });
    EXPECT_EQ(sum.load(), 500LL * nt * (nt + 1) / 2);
  }
}

// run() returns only once every worker has finished the job and its writes are visible:
// plain (non-atomic) per-thread counters are checked after every job, so a join that let
// the caller go while a worker was still running (or before its stores were published)
// fails here.
TEST(ThreadPool, RunReturnsAfterEveryWorkerFinished) {
  for (int nt : {2, 3, 5}) {
    ThreadPool pool(nt);
    std::vector<int64_t> count(static_cast<size_t>(nt) * 16, 0);  // a cache line apart
    for (int r = 0; r < 200; ++r) {
      pool.run([&](int t, int) {
        if (t == 0) return;  // the caller finishes first
        volatile int spin = 0;
        for (int i = 0; i < 2000 * t; ++i) spin = spin + 1;
        count[static_cast<size_t>(t) * 16] += 1;
      });
      for (int t = 1; t < nt; ++t)
        ASSERT_EQ(count[static_cast<size_t>(t) * 16], r + 1) << nt << " " << t;
    }
  }
}

TEST(HugeBuffer, LargeIsHugePageAlignedWritableAndMovable) {
  const size_t bytes = 3 * HugeBuffer::kHugePage + 12345;
  HugeBuffer b(bytes);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.size(), bytes);
#if defined(__linux__)
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % HugeBuffer::kHugePage, 0u);
#endif
  std::memset(b.data(), 0x5a, bytes);
  std::byte* p = b.data();
  HugeBuffer moved(std::move(b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(moved.data()[bytes - 1], std::byte{0x5a});
  HugeBuffer other(100);
  other = std::move(moved);
  EXPECT_EQ(other.data(), p);
  EXPECT_EQ(other.data()[0], std::byte{0x5a});
}

TEST(HugeBuffer, SmallAndEmpty) {
  HugeBuffer none(0);
  EXPECT_TRUE(none.empty());
  HugeBuffer small(1000);
  ASSERT_FALSE(small.empty());
  EXPECT_FALSE(small.advised());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  std::memset(small.data(), 1, 1000);
}

}  // namespace
}  // namespace sieve

// Counts claimed by a file must never turn into allocations (CVE-2024-23605, llama.cpp issue
// #19003): this binary replaces operator new to record the largest single request made
// while the reader parses small files that claim enormous counts and lengths.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_test_writer.h"

namespace {

std::atomic<bool> g_tracking{false};
std::atomic<size_t> g_largest{0};
std::atomic<size_t> g_total{0};

void* tracked_alloc(size_t n) {
  if (g_tracking.load(std::memory_order_relaxed)) {
    size_t cur = g_largest.load(std::memory_order_relaxed);
    while (n > cur && !g_largest.compare_exchange_weak(cur, n)) {
    }
    g_total.fetch_add(n, std::memory_order_relaxed);
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(size_t n) {
  return tracked_alloc(n);
}
void* operator new[](size_t n) {
  return tracked_alloc(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}

namespace sieve {
namespace {

using testing::GgufWriter;
using testing::put_u64;
using VT = GgufValueType;

struct AllocStats {
  size_t largest = 0;
  size_t total = 0;
};

AllocStats parse_tracked(const std::vector<uint8_t>& b, bool expect_ok) {
  g_largest = 0;
  g_total = 0;
  g_tracking = true;
  {
    auto r = GgufFile::from_memory(b.data(), b.size());
    g_tracking = false;
    EXPECT_EQ(r.ok(), expect_ok) << (r.ok() ? "" : r.message());
  }
  return {g_largest.load(), g_total.load()};
}

TEST(GgufAlloc, HugeClaimsAllocateNothingLarge) {
  GgufWriter w;
  w.kv_string("general.architecture", "llama");
  w.kv_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w.kv_array<uint8_t>("bytes", VT::UINT8, {1, 2, 3});
  w.tensor("t", GgmlType::F32, {8});
  GgufWriter::Layout lay;
  const auto good = w.build(&lay);
  const uint64_t huge[] = {uint64_t{1} << 30, uint64_t{1} << 40, uint64_t{1} << 62,
                           std::numeric_limits<uint64_t>::max()};
  // KV_BAD_VALUE_SIZE in llama.cpp's test-gguf is disabled because it allocates > 1 TB; here
  // the string length, both array counts, both header counts and the key length are huge.
  const uint64_t fields[] = {
      lay.kvs[0].value_at, lay.kvs[1].value_at + 4, lay.kvs[2].value_at + 4, 8, 16,
      lay.kvs[1].start};
  for (uint64_t field : fields) {
    for (uint64_t n : huge) {
      auto b = good;
      put_u64(b, field, n);
      const AllocStats s = parse_tracked(b, false);
      EXPECT_LT(s.largest, size_t{64} << 10) << "field at byte " << field << " = " << n;
      EXPECT_LT(s.total, size_t{1} << 20) << "field at byte " << field << " = " << n;
    }
  }
}

TEST(GgufAlloc, ValidFileUsesMemoryProportionalToItsEntries) {
  GgufWriter w;
  std::vector<std::string> toks(5000, "x");
  w.kv_string_array("tokenizer.ggml.tokens", toks);
  for (int i = 0; i < 100; ++i) w.kv_u32("k." + std::to_string(i), i);
  for (int i = 0; i < 100; ++i) w.tensor("t." + std::to_string(i), GgmlType::F32, {8});
  const auto b = w.build();
  const AllocStats s = parse_tracked(b, true);
  // No per-array-element storage: the string array stays a view into the file.
  EXPECT_LT(s.total, size_t{256} << 10) << s.total;
}

}  // namespace
}  // namespace sieve

// Window streams: sinks + the last W tokens; pages wholly out of the window go back.
#include <gtest/gtest.h>

#include "kv/kv_store.h"
#include "kv/kv_test_util.h"

namespace sieve {
namespace {

using kv_test::append;
using kv_test::make_store;
using kv_test::positions;
using kv_test::small_config;
using V = std::vector<int32_t>;

// Positions an aligned (eviction-free) window stream holds after a step that started at
// next position p and appended n tokens: pages holding a sink or a position >= p - window.
V expected_window(int32_t p, int32_t n, int32_t window, int32_t n_sink, int32_t ps) {
  V out;
  for (int32_t pos = 0; pos < p + n; ++pos) {
    const int32_t j = pos / ps;
    if (j * ps < n_sink || (j + 1) * ps - 1 >= p - window) out.push_back(pos);
  }
  return out;
}

struct WindowCase {
  int32_t window, n_sink, page_size, chunk;
};

class KvWindow : public ::testing::TestWithParam<WindowCase> {};

TEST_P(KvWindow, KeepsSinksAndWindowAndReturnsPages) {
  const WindowCase wc = GetParam();
  // layer 0 full, layer 1 windowed
  KvStore kv = make_store(small_config(
      2, 200, wc.page_size, {KvCapacity::full(), KvCapacity::sliding(wc.window, wc.n_sink)}));
  const KvSeqId s = kv.add_sequence({}).value().seq;
  const int32_t ps = wc.page_size;
  const int32_t max_window_pages =
      (wc.n_sink + ps - 1) / ps + (wc.window + ps - 1) / ps + 1 + (wc.chunk + ps - 1) / ps;
  int32_t p = 0;
  while (p < 150) {
    const V t = kv_test::iota_tokens(wc.chunk, 7 * p);
    ASSERT_TRUE(append(kv, s, t));
    EXPECT_EQ(positions(kv, s, 1), expected_window(p, wc.chunk, wc.window, wc.n_sink, ps)) << p;
    p += wc.chunk;
    EXPECT_EQ(kv.stream_len(s, 0), p);
    EXPECT_LE(kv.seq_view(s, 1).n_pages(), max_window_pages);
    EXPECT_TRUE(kv_test::rows_match(kv, s, 1));
    SIEVE_EXPECT_KV_OK(kv);
  }
  // the pool holds only the full stream's pages plus the bounded window pages
  const int32_t full_pages = (p + ps - 1) / ps;
  EXPECT_EQ(kv.pool().n_used(), full_pages + kv.seq_view(s, 1).n_pages());
  ASSERT_TRUE(kv.free_sequence(s).ok());
  EXPECT_EQ(kv.pool().n_used(), 0);
  SIEVE_EXPECT_KV_OK(kv);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvWindow,
                         ::testing::Values(WindowCase{8, 2, 4, 1},   // decode, small sinks
                                           WindowCase{8, 0, 4, 1},   // no sinks: page 0 goes
                                           WindowCase{10, 5, 4, 3},  // sinks span two pages
                                           WindowCase{6, 1, 3, 7},   // chunks wider than W
                                           WindowCase{1, 0, 1, 1},   // page size 1
                                           WindowCase{16, 4, 16, 5}));

TEST(KvWindowStep, DropsHappenBeforeTheStepFromItsStartPosition) {
  // A 20-token prefill chunk keeps its own tokens (its queries need them); the next step
  // drops what no query from position 20 on can see.
  KvStore kv = make_store(small_config(1, 20, 4, {KvCapacity::sliding(8, 2)}));
  const KvSeqId s = kv.add_sequence({}).value().seq;
  ASSERT_TRUE(append(kv, s, kv_test::iota_tokens(20)));
  EXPECT_EQ(kv.stream_len(s, 0), 20);
  EXPECT_EQ(kv.pool().n_used(), 5);

  // plan counts the dropped pages as available: with 0 free pages the step still fits
  const V filler = kv_test::iota_tokens(60, 900);
  const KvSeqId other = kv.add_sequence({}).value().seq;
  ASSERT_TRUE(append(kv, other, filler, /*publish=*/false));
  EXPECT_EQ(kv.pool().n_available(), 0);
  const V one = {3};
  const KvAppend item{s, one};
  const KvRoom room = kv.plan({&item, 1}).value();
  EXPECT_EQ(room.n_pages_needed, 1);
  EXPECT_EQ(room.n_pages_available, 2);  // pages of positions 4..7 and 8..11
  ASSERT_TRUE(kv.reserve({&item, 1})->fits());
  kv_test::write_new_rows(kv, s, 1);
  EXPECT_EQ(positions(kv, s, 0), (V{0, 1, 2, 3, 12, 13, 14, 15, 16, 17, 18, 19, 20}));
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvWindowStep, SharedWindowPagesReturnOnlyWhenTheLastHolderDrops) {
  KvStore kv = make_store(small_config(1, 30, 4, {KvCapacity::sliding(5, 0)}));
  const V p = kv_test::iota_tokens(21);
  const KvSeqId a = kv.add_sequence(p).value().seq;
  ASSERT_TRUE(append(kv, a, p));
  // B reuses 20 tokens; a query at 20 sees positions >= 15: pages of 12..15 and 16..19
  const KvSeqAdd b = kv.add_sequence(p).value();
  EXPECT_EQ(b.n_cached, 20);
  EXPECT_EQ(positions(kv, b.seq, 0), (V{12, 13, 14, 15, 16, 17, 18, 19}));
  const int32_t available_before = kv.pool().n_available();
  // A's next step (from 21) drops its pages of 0..15; the one of 12..15 is B's too, so
  // only three pages come back (cached: they are published prefix pages)
  ASSERT_TRUE(append(kv, a, V{1}));
  EXPECT_EQ(positions(kv, a, 0), (V{16, 17, 18, 19, 20, 21}));
  EXPECT_EQ(kv.pool().n_available(), available_before + 3);
  EXPECT_EQ(kv.pool().n_cached(), 3);
  EXPECT_EQ(positions(kv, b.seq, 0), (V{12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_TRUE(kv_test::rows_match(kv, b.seq, 0));
  SIEVE_EXPECT_KV_OK(kv);
}

}  // namespace
}  // namespace sieve

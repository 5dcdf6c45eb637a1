// Prefix sharing: chain-hashed full pages, reference counts, the LRU of cached pages.
#include <gtest/gtest.h>

#include "kv/kv_store.h"
#include "kv/kv_test_util.h"

namespace sieve {
namespace {

using kv_test::append;
using kv_test::make_store;
using kv_test::pages;
using kv_test::positions;
using kv_test::small_config;
using V = std::vector<int32_t>;

V concat(V a, const V& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(KvPrefix, SharesFullPagesAndCachesThemInLruOrder) {
  KvStore kv = make_store(small_config(2, 16));
  const V pa = kv_test::iota_tokens(10);

  const KvSeqAdd a = kv.add_sequence(pa).value();
  EXPECT_EQ(a.n_cached, 0);
  ASSERT_TRUE(append(kv, a.seq, pa));
  EXPECT_EQ(pages(kv, a.seq, 0), (V{0, 1, 2}));
  EXPECT_EQ(pages(kv, a.seq, 1), (V{3, 4, 5}));
  // two full pages per stream published, the partial third not
  for (int32_t p : {0, 1, 3, 4}) EXPECT_TRUE(kv.pool().has_hash(p)) << p;
  for (int32_t p : {2, 5}) EXPECT_FALSE(kv.pool().has_hash(p)) << p;
  SIEVE_EXPECT_KV_OK(kv);

  // B: same first 8 tokens, then different ones
  const V pb = concat(V(pa.begin(), pa.begin() + 8), V{900, 901, 902});
  EXPECT_EQ(kv.peek_prefix(pb), 8);
  const KvSeqAdd b = kv.add_sequence(pb).value();
  EXPECT_EQ(b.n_cached, 8);
  EXPECT_EQ(kv.n_tokens(b.seq), 8);
  EXPECT_EQ(pages(kv, b.seq, 0), (V{0, 1}));
  EXPECT_EQ(pages(kv, b.seq, 1), (V{3, 4}));
  EXPECT_EQ(kv.pool().refcount(0), 2);
  EXPECT_TRUE(kv_test::rows_match(kv, b.seq, 0));  // A's rows are B's prefix rows
  ASSERT_TRUE(append(kv, b.seq, V{900, 901, 902}));
  EXPECT_EQ(pages(kv, b.seq, 0), (V{0, 1, 6}));
  EXPECT_EQ(pages(kv, b.seq, 1), (V{3, 4, 7}));
  EXPECT_EQ(positions(kv, b.seq, 1), (V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  SIEVE_EXPECT_KV_OK(kv);

  // C: exactly two pages of prompt, but one token must be left to compute -> one page
  const KvSeqAdd c = kv.add_sequence(V(pa.begin(), pa.begin() + 8)).value();
  EXPECT_EQ(c.n_cached, 4);
  EXPECT_EQ(pages(kv, c.seq, 0), (V{0}));
  EXPECT_EQ(kv.pool().refcount(0), 3);
  EXPECT_EQ(kv.pool().refcount(1), 2);
  EXPECT_EQ(kv.pool().refcount(3), 3);
  // other namespaces and a changed first token share nothing
  EXPECT_EQ(kv.peek_prefix(pa, "tenant-2"), 0);
  EXPECT_EQ(kv.peek_prefix(concat(V{1}, V(pa.begin() + 1, pa.end()))), 0);
  SIEVE_EXPECT_KV_OK(kv);

  // free all three: B's pages 1 and 4 then C's pages 0 and 3 become cached, in that order
  ASSERT_TRUE(kv.free_sequence(a.seq).ok());
  EXPECT_EQ(kv.pool().n_cached(), 0);
  ASSERT_TRUE(kv.free_sequence(b.seq).ok());
  EXPECT_EQ(kv.pool().lru_order(), (V{1, 4}));
  ASSERT_TRUE(kv.free_sequence(c.seq).ok());
  EXPECT_EQ(kv.pool().lru_order(), (V{1, 4, 0, 3}));
  EXPECT_EQ(kv.pool().n_free(), 12);
  EXPECT_EQ(kv.peek_prefix(pa), 8);  // cached pages still match
  SIEVE_EXPECT_KV_OK(kv);

  // E needs 14 pages: the 12 free ones (most recently freed first), then LRU pages 1 and 4
  const V pe = kv_test::iota_tokens(26, 1000);
  const KvSeqAdd e = kv.add_sequence(pe).value();
  ASSERT_TRUE(append(kv, e.seq, pe));
  EXPECT_EQ(pages(kv, e.seq, 0), (V{7, 6, 5, 2, 8, 9, 10}));
  EXPECT_EQ(pages(kv, e.seq, 1), (V{11, 12, 13, 14, 15, 1, 4}));
  EXPECT_EQ(kv.pool().lru_order(), (V{0, 3}));
  EXPECT_EQ(kv.peek_prefix(pa), 4);  // page 1 of the chain is gone, page 0 survives
  SIEVE_EXPECT_KV_OK(kv);

  const KvSeqAdd d = kv.add_sequence(pa).value();
  EXPECT_EQ(d.n_cached, 4);
  EXPECT_EQ(pages(kv, d.seq, 0), (V{0}));
  EXPECT_EQ(pages(kv, d.seq, 1), (V{3}));
  EXPECT_EQ(kv.pool().n_cached(), 0);
  EXPECT_TRUE(kv_test::rows_match(kv, d.seq, 1));
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvPrefix, DuplicateComputationKeepsOneCachedCopy) {
  KvStore kv = make_store(small_config(1, 8));
  const V p = kv_test::iota_tokens(9);
  const KvSeqId x = kv.add_sequence(p).value().seq;
  const KvSeqId y = kv.add_sequence(p).value().seq;  // nothing published yet
  ASSERT_TRUE(append(kv, x, p));
  ASSERT_TRUE(append(kv, y, p));
  EXPECT_EQ(pages(kv, x, 0), (V{0, 1, 2}));
  EXPECT_EQ(pages(kv, y, 0), (V{3, 4, 5}));
  EXPECT_TRUE(kv.pool().has_hash(0));
  EXPECT_FALSE(kv.pool().has_hash(3));  // same content as page 0: not registered twice
  ASSERT_TRUE(kv.free_sequence(y).ok());
  EXPECT_EQ(kv.pool().n_cached(), 0);
  ASSERT_TRUE(kv.free_sequence(x).ok());
  EXPECT_EQ(kv.pool().lru_order(), (V{1, 0}));  // deepest page first
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvPrefix, UnpublishedPagesAreNotShared) {
  KvStore kv = make_store(small_config(1, 8));
  const V p = kv_test::iota_tokens(9);
  const KvSeqId x = kv.add_sequence(p).value().seq;
  ASSERT_TRUE(append(kv, x, p, /*publish=*/false));
  EXPECT_EQ(kv.peek_prefix(p), 0);  // K/V not declared written yet
  ASSERT_TRUE(kv.publish(x).ok());
  EXPECT_EQ(kv.peek_prefix(p), 8);
  ASSERT_TRUE(kv.publish(x).ok());  // idempotent
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvPrefix, DisabledCacheSharesNothing) {
  KvConfig c = small_config(1, 8);
  c.prefix_cache = false;
  KvStore kv = make_store(c);
  const V p = kv_test::iota_tokens(9);
  const KvSeqId x = kv.add_sequence(p).value().seq;
  ASSERT_TRUE(append(kv, x, p));
  EXPECT_FALSE(kv.pool().has_hash(0));
  EXPECT_EQ(kv.add_sequence(p)->n_cached, 0);
  ASSERT_TRUE(kv.free_sequence(x).ok());
  EXPECT_EQ(kv.pool().n_cached(), 0);
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvPrefix, WindowStreamsNeedOnlySinkAndWindowPages) {
  // stream 0 full, stream 1 window of 8 with 2 sinks, 4 tokens per page
  KvStore kv = make_store(small_config(2, 40, 4, {KvCapacity::full(), KvCapacity::sliding(8, 2)}));
  const V pa = kv_test::iota_tokens(40);
  const KvSeqId a = kv.add_sequence(pa).value().seq;
  ASSERT_TRUE(append(kv, a, pa));  // one prefill step: nothing to drop before it
  EXPECT_EQ(kv.stream_len(a, 1), 40);
  EXPECT_EQ(pages(kv, a, 1), (V{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));

  // the next step sees position 40: pages 1..7 (positions 4..31) are out of every window
  ASSERT_TRUE(append(kv, a, V{7}));
  EXPECT_EQ(pages(kv, a, 1), (V{10, 18, 19, 21}));
  EXPECT_EQ(positions(kv, a, 1), (V{0, 1, 2, 3, 32, 33, 34, 35, 36, 37, 38, 39, 40}));
  EXPECT_EQ(pages(kv, a, 0).size(), 11u);  // the full stream keeps everything
  // published window pages stay cached after the drop, oldest first
  EXPECT_EQ(kv.pool().lru_order(), (V{11, 12, 13, 14, 15, 16, 17}));
  SIEVE_EXPECT_KV_OK(kv);

  // B: prompt = A's 40 tokens + 1 -> all 40 cached; its window stream takes sink + window
  const KvSeqAdd b = kv.add_sequence(concat(pa, V{5})).value();
  EXPECT_EQ(b.n_cached, 40);
  EXPECT_EQ(pages(kv, b.seq, 0), (V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(pages(kv, b.seq, 1), (V{10, 18, 19}));
  EXPECT_EQ(kv.stream_len(b.seq, 1), 12);
  EXPECT_TRUE(kv_test::rows_match(kv, b.seq, 1));

  // C: 30 tokens + 1 -> 7 pages; the window pages 5 and 6 come back from the LRU
  const KvSeqAdd c = kv.add_sequence(concat(V(pa.begin(), pa.begin() + 30), V{5})).value();
  EXPECT_EQ(c.n_cached, 28);
  EXPECT_EQ(pages(kv, c.seq, 1), (V{10, 15, 16}));
  EXPECT_EQ(positions(kv, c.seq, 1), (V{0, 1, 2, 3, 20, 21, 22, 23, 24, 25, 26, 27}));
  EXPECT_EQ(kv.pool().lru_order(), (V{11, 12, 13, 14, 17}));
  SIEVE_EXPECT_KV_OK(kv);

  // reclaim LRU pages 11 and 12 (window pages 1 and 2): a 16-token prompt can then reuse
  // only one page, since every longer prefix needs a window page that is gone
  const V pd = concat(V(pa.begin(), pa.begin() + 16), V{5});
  EXPECT_EQ(kv.peek_prefix(pd), 16);
  EXPECT_EQ(kv.pool().n_free(), 18);
  const V pf = kv_test::iota_tokens(40, 5000);
  const KvSeqId f = kv.add_sequence(pf).value().seq;
  ASSERT_TRUE(append(kv, f, pf));
  EXPECT_EQ(kv.pool().lru_order(), (V{13, 14, 17}));
  EXPECT_EQ(kv.peek_prefix(pd), 4);
  SIEVE_EXPECT_KV_OK(kv);
}

}  // namespace
}  // namespace sieve

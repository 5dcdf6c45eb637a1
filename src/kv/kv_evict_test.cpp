// Token eviction: order and original positions kept, compaction, copy-on-write, atomicity.
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

TEST(KvEvict, KeepsOrderPositionsAndSideDataAndFreesPages) {
  KvConfig c = small_config(2, 16);
  c.sketch_dim = 1;
  c.n_token_scores = 2;
  KvStore kv = make_store(c);
  const V t = kv_test::iota_tokens(14);
  const KvSeqId s = kv.add_sequence({}).value().seq;
  ASSERT_TRUE(append(kv, s, t, /*publish=*/false));
  EXPECT_EQ(pages(kv, s, 1), (V{4, 5, 6, 7}));
  const int32_t free_before = kv.pool().n_free();

  Result<KvRoom> r = kv.evict(s, 1, V{1, 5, 6, 13});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->fits());
  EXPECT_EQ(r->n_pages_needed, 0);
  EXPECT_EQ(positions(kv, s, 1), (V{0, 2, 3, 4, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(pages(kv, s, 1), (V{4, 5, 6}));  // compacted into the first three pages
  EXPECT_EQ(kv.seq_view(s, 1).last_page_len(), 2);
  EXPECT_EQ(kv.pool().n_free(), free_before + 1);
  EXPECT_TRUE(kv_test::rows_match(kv, s, 1));  // every row moved with its position
  const KvSeqView v = kv.seq_view(s, 1);
  for (int32_t i = 0; i < v.n_tokens; ++i) {
    EXPECT_EQ(v.sketch(i)[0], static_cast<float>(v.position(i)));
    EXPECT_EQ(v.scores(i)[1], 0.5f * v.position(i) + 1);
  }
  // the other stream is untouched; streams have their own lengths
  EXPECT_EQ(kv.stream_len(s, 0), 14);
  EXPECT_EQ(kv.stream_len(s, 1), 10);
  EXPECT_EQ(kv.n_tokens(s), 14);
  SIEVE_EXPECT_KV_OK(kv);

  // appends continue after the kept tokens with the next positions
  ASSERT_TRUE(append(kv, s, V{1, 2, 3}, false));
  EXPECT_EQ(positions(kv, s, 1), (V{0, 2, 3, 4, 7, 8, 9, 10, 11, 12, 14, 15, 16}));
  EXPECT_EQ(pages(kv, s, 0), (V{0, 1, 2, 3, 7}));  // page 7 was freed just before
  EXPECT_EQ(pages(kv, s, 1), (V{4, 5, 6, 8}));
  SIEVE_EXPECT_KV_OK(kv);

  // evicting everything leaves an empty stream with no pages
  V all(kv.stream_len(s, 1));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  ASSERT_TRUE(kv.evict(s, 1, all)->fits());
  EXPECT_EQ(kv.stream_len(s, 1), 0);
  EXPECT_TRUE(pages(kv, s, 1).empty());
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvEvict, RejectsBadIndicesWithoutChanges) {
  KvStore kv = make_store(small_config(1, 8));
  const KvSeqId s = kv.add_sequence({}).value().seq;
  ASSERT_TRUE(append(kv, s, kv_test::iota_tokens(6)));
  EXPECT_FALSE(kv.evict(s, 0, V{3, 2}).ok());
  EXPECT_FALSE(kv.evict(s, 0, V{2, 2}).ok());
  EXPECT_FALSE(kv.evict(s, 0, V{6}).ok());
  EXPECT_FALSE(kv.evict(s, 0, V{-1}).ok());
  EXPECT_FALSE(kv.evict(s, 1, V{0}).ok());
  EXPECT_FALSE(kv.evict(s + 1, 0, V{0}).ok());
  EXPECT_FALSE(kv.truncate(s, 0, 7).ok());
  EXPECT_TRUE(kv.evict(s, 0, V{})->fits());
  EXPECT_EQ(kv.stream_len(s, 0), 6);
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvEvict, SharedPagesAreCopiedOnWrite) {
  KvStore kv = make_store(small_config(1, 8));
  const V p = kv_test::iota_tokens(9);
  const KvSeqId a = kv.add_sequence(p).value().seq;
  ASSERT_TRUE(append(kv, a, p));
  EXPECT_EQ(pages(kv, a, 0), (V{0, 1, 2}));
  const KvSeqAdd b = kv.add_sequence(p).value();
  ASSERT_EQ(b.n_cached, 8);
  ASSERT_TRUE(append(kv, b.seq, V{p[8]}));
  EXPECT_EQ(pages(kv, b.seq, 0), (V{0, 1, 3}));

  // B drops token 2: both shared pages change for B, so B gets fresh pages 4 and 5
  Result<KvRoom> r = kv.evict(b.seq, 0, V{2});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_pages_needed, 2);
  EXPECT_EQ(pages(kv, b.seq, 0), (V{4, 5}));
  EXPECT_EQ(positions(kv, b.seq, 0), (V{0, 1, 3, 4, 5, 6, 7, 8}));
  EXPECT_TRUE(kv_test::rows_match(kv, b.seq, 0));
  // A is untouched and its pages are its own again; B's old page 3 was freed
  EXPECT_EQ(pages(kv, a, 0), (V{0, 1, 2}));
  EXPECT_EQ(positions(kv, a, 0), (V{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_TRUE(kv_test::rows_match(kv, a, 0));
  EXPECT_EQ(kv.pool().refcount(0), 1);
  EXPECT_EQ(kv.pool().state(3), KvPageState::free);
  EXPECT_FALSE(kv.pool().has_hash(4));
  EXPECT_EQ(kv.peek_prefix(p), 8);  // A's published pages still serve the prefix
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvEvict, CopyOnWriteWithoutRoomChangesNothing) {
  KvStore kv = make_store(small_config(1, 5));
  const V p = kv_test::iota_tokens(9);
  const KvSeqId a = kv.add_sequence(p).value().seq;
  ASSERT_TRUE(append(kv, a, p));
  const KvSeqId b = kv.add_sequence(p).value().seq;
  ASSERT_TRUE(append(kv, b, V{p[8]}));
  EXPECT_EQ(kv.pool().n_available(), 1);
  Result<KvRoom> r = kv.evict(b, 0, V{2});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->fits());
  EXPECT_EQ(r->n_pages_missing(), 1);
  EXPECT_EQ(pages(kv, b, 0), (V{0, 1, 3}));
  EXPECT_EQ(positions(kv, b, 0), (V{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(kv.pool().refcount(0), 2);
  // evicting only within B's own last page needs no copy
  ASSERT_TRUE(kv.evict(b, 0, V{8})->fits());
  EXPECT_EQ(pages(kv, b, 0), (V{0, 1}));
  SIEVE_EXPECT_KV_OK(kv);
  // truncating into a shared page needs one fresh page
  r = kv.truncate(b, 0, 6);
  ASSERT_TRUE(r->fits());
  EXPECT_EQ(r->n_pages_needed, 1);
  EXPECT_EQ(pages(kv, b, 0)[0], 0);
  EXPECT_NE(pages(kv, b, 0)[1], 1);
  EXPECT_TRUE(kv_test::rows_match(kv, b, 0));
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvEvict, EvictedPagesAreNotPublishedAndRewrittenPagesLoseTheirHash) {
  KvStore kv = make_store(small_config(1, 16));
  const V p = kv_test::iota_tokens(13);
  const KvSeqId a = kv.add_sequence(p).value().seq;
  ASSERT_TRUE(append(kv, a, p));
  EXPECT_EQ(kv.peek_prefix(p), 12);
  // rewriting page 1 onwards forgets hashes of pages 1 and 2; page 0 still matches
  ASSERT_TRUE(kv.evict(a, 0, V{5})->fits());
  EXPECT_TRUE(kv.pool().has_hash(0));
  EXPECT_FALSE(kv.pool().has_hash(1));
  EXPECT_FALSE(kv.pool().has_hash(2));
  EXPECT_EQ(kv.peek_prefix(p), 4);
  // later appends do not publish the moved tokens, though pages fill up again
  ASSERT_TRUE(append(kv, a, V{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(kv.pool().has_hash(1));
  EXPECT_EQ(kv.peek_prefix(p), 4);
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvEvict, UniPrefillCompactedLayerAfterADrop) {
  // Layer 0 writes all 12 tokens of a chunk; layer 1 (after the drop) keeps only some.
  KvStore kv = make_store(small_config(2, 16));
  const V p = kv_test::iota_tokens(13);
  const KvSeqId s = kv.add_sequence(p).value().seq;
  const V chunk(p.begin(), p.begin() + 12);
  const KvAppend item{s, chunk};
  ASSERT_TRUE(kv.reserve({&item, 1})->fits());
  // the drop keeps chunk offsets {0, 1, 4, 5, 8, 9, 10, 11}: evict the rest before writing
  ASSERT_TRUE(kv.evict(s, 1, V{2, 3, 6, 7})->fits());
  EXPECT_EQ(positions(kv, s, 1), (V{0, 1, 4, 5, 8, 9, 10, 11}));
  EXPECT_EQ(kv.stream_len(s, 1), 8);
  for (int32_t i = 0; i < 12; ++i) {  // write every layer as the forward pass would
    KvRowRef r0 = kv.row(s, 0, i);
    for (int32_t e = 0; e < 8; ++e) r0.k_f32()[e] = r0.v_f32()[e] = float(i);
  }
  for (int32_t i = 0; i < 8; ++i) {
    KvRowRef r1 = kv.row(s, 1, i);
    for (int32_t e = 0; e < 8; ++e) r1.k_f32()[e] = r1.v_f32()[e] = float(r1.position);
  }
  ASSERT_TRUE(kv.publish(s).ok());
  // layer 0 published its three pages; layer 1 none, so no prompt matches both
  EXPECT_TRUE(kv.pool().has_hash(kv.seq_view(s, 0).pages[2]));
  for (int32_t page : pages(kv, s, 1)) EXPECT_FALSE(kv.pool().has_hash(page));
  EXPECT_EQ(kv.peek_prefix(p), 0);
  // decode continues in both layers with the next position
  const KvAppend next{s, std::span<const int32_t>(&p[12], 1)};
  ASSERT_TRUE(kv.reserve({&next, 1})->fits());
  EXPECT_EQ(positions(kv, s, 1).back(), 12);
  EXPECT_EQ(kv.stream_len(s, 0), 13);
  EXPECT_EQ(kv.stream_len(s, 1), 9);
  SIEVE_EXPECT_KV_OK(kv);
}

}  // namespace
}  // namespace sieve

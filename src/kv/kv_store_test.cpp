#include "kv/kv_store.h"

#include <gtest/gtest.h>

#include "core/fp16.h"
#include "kv/kv_test_util.h"

namespace sieve {
namespace {

using kv_test::append;
using kv_test::make_store;
using kv_test::pages;
using kv_test::positions;
using kv_test::small_config;

TEST(KvStore, AppendsFillPagesAndCsrNamesThem) {
  KvStore kv = make_store(small_config(2, 16));
  const KvSeqId a = kv.add_sequence(kv_test::iota_tokens(6)).value().seq;
  const KvSeqId b = kv.add_sequence(kv_test::iota_tokens(3, 500)).value().seq;
  EXPECT_NE(a, b);
  SIEVE_EXPECT_KV_OK(kv);

  const std::vector<int32_t> ta = kv_test::iota_tokens(6), tb = kv_test::iota_tokens(3, 500);
  const KvAppend step[] = {{a, ta}, {b, tb}};
  Result<KvRoom> room = kv.reserve(step);
  ASSERT_TRUE(room.ok()) << room.message();
  EXPECT_TRUE(room->fits());
  EXPECT_EQ(room->n_pages_needed, 6);  // a: 2 pages x 2 streams, b: 1 x 2
  SIEVE_EXPECT_KV_OK(kv);
  // allocation order: sequence by sequence, stream by stream, pages 0, 1, 2, ...
  EXPECT_EQ(pages(kv, a, 0), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pages(kv, a, 1), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(pages(kv, b, 0), (std::vector<int32_t>{4}));
  EXPECT_EQ(pages(kv, b, 1), (std::vector<int32_t>{5}));
  EXPECT_EQ(kv.n_tokens(a), 6);
  EXPECT_EQ(kv.stream_len(b, 1), 3);
  EXPECT_EQ(positions(kv, a, 1), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));

  KvCsr csr;
  const KvSeqId batch[] = {b, a};
  kv.fill_csr(1, batch, csr);
  EXPECT_EQ(csr.indptr, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(csr.indices, (std::vector<int32_t>{5, 2, 3}));
  EXPECT_EQ(csr.last_page_len, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(csr.n_tokens, (std::vector<int32_t>{3, 6}));

  // the next token of a fills page 1's third slot: no new page
  const int32_t t7[] = {7};
  ASSERT_TRUE(append(kv, a, t7));
  EXPECT_EQ(pages(kv, a, 0), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kv.seq_view(a, 0).last_page_len(), 3);
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvStore, RowsAreReadInPlaceThroughViews) {
  KvConfig c = small_config(2, 16);
  c.sketch_dim = 2;
  c.n_token_scores = 1;
  KvStore kv = make_store(c);
  const std::vector<int32_t> t = kv_test::iota_tokens(11);
  const KvSeqId s = kv.add_sequence(t).value().seq;
  ASSERT_TRUE(append(kv, s, t));
  EXPECT_TRUE(kv_test::rows_match(kv, s, 0));
  EXPECT_TRUE(kv_test::rows_match(kv, s, 1));

  const KvView view = kv.view();
  const KvSeqView v = view.seq(s, 1);
  const KvArenas& a = view.arenas();
  for (int32_t i = 0; i < v.n_tokens; ++i) {
    // the view's pointer is the arena row of the slot named by the page table: no copy
    const int64_t slot = int64_t{v.pages[i / 4]} * 4 + i % 4;
    EXPECT_EQ(v.k(i), reinterpret_cast<const float*>(a.k + slot * a.kv_row_bytes));
    EXPECT_EQ(v.sketch(i)[0], static_cast<float>(i));
    EXPECT_EQ(v.scores(i)[0], 0.5f * i);
  }
  // head h of a page starts head_dim elements after head h-1; rows are n_head*head_dim apart
  const float* h1 = reinterpret_cast<const float*>(v.k_page_head(2, 1));
  EXPECT_EQ(h1, v.k(8) + 4);
  EXPECT_EQ(h1 + 8, v.k(9) + 4);
  EXPECT_EQ(v.page_positions(2)[2], 10);

  // side data is writable through the read-only view (scorers accumulate importance)
  v.scores(3)[0] = 42.0f;
  EXPECT_EQ(kv.seq_view(s, 1).scores(3)[0], 42.0f);
}

TEST(KvStore, StoresF16Rows) {
  KvConfig c = small_config(1, 8);
  c.dtype = KvDtype::f16;
  KvStore kv = make_store(c);
  const KvSeqId s = kv.add_sequence({}).value().seq;
  const std::vector<int32_t> t = kv_test::iota_tokens(5);
  const KvAppend item{s, t};
  ASSERT_TRUE(kv.reserve({&item, 1})->fits());
  for (int32_t i = 0; i < 5; ++i) {
    KvRowRef r = kv.row(s, 0, i);
    for (int32_t e = 0; e < 8; ++e) r.k_f16()[e] = f32_to_fp16(static_cast<float>(i * 10 + e));
  }
  const KvSeqView v = kv.seq_view(s, 0);
  EXPECT_EQ(fp16_to_f32(v.k_f16(4)[7]), 47.0f);
  EXPECT_EQ(v.k_raw(1) - v.k_raw(0), 2 * 4 * 2);  // row = n_head * head_dim * 2 bytes
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvStore, ReserveIsAllOrNothing) {
  KvStore kv = make_store(small_config(1, 6));
  const KvSeqId x = kv.add_sequence({}).value().seq;
  const KvSeqId y = kv.add_sequence({}).value().seq;
  const std::vector<int32_t> t8 = kv_test::iota_tokens(8);
  const KvAppend first[] = {{x, t8}, {y, t8}};
  ASSERT_TRUE(kv.reserve(first)->fits());
  EXPECT_EQ(kv.pool().n_free(), 2);

  const std::vector<int32_t> t5 = kv_test::iota_tokens(5), t1 = {1};
  const KvAppend too_big[] = {{x, t5}, {y, t1}};
  Result<KvRoom> planned = kv.plan(too_big);
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(planned->n_pages_needed, 3);
  EXPECT_EQ(planned->n_pages_available, 2);
  Result<KvRoom> room = kv.reserve(too_big);
  ASSERT_TRUE(room.ok());
  EXPECT_FALSE(room->fits());
  EXPECT_EQ(room->n_pages_missing(), 1);
  // nothing changed
  EXPECT_EQ(kv.n_tokens(x), 8);
  EXPECT_EQ(kv.n_tokens(y), 8);
  EXPECT_EQ(pages(kv, x, 0), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pages(kv, y, 0), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(kv.pool().n_free(), 2);
  SIEVE_EXPECT_KV_OK(kv);

  const KvAppend fits[] = {{x, t5}};
  room = kv.reserve(fits);
  ASSERT_TRUE(room->fits());
  EXPECT_EQ(pages(kv, x, 0), (std::vector<int32_t>{0, 1, 4, 5}));
  EXPECT_EQ(kv.pool().n_free(), 0);
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvStore, ReserveRejectsBadSteps) {
  KvStore kv = make_store(small_config(1, 6));
  const KvSeqId x = kv.add_sequence({}).value().seq;
  const std::vector<int32_t> t = {1, 2};
  const KvAppend twice[] = {{x, t}, {x, t}};
  EXPECT_FALSE(kv.reserve(twice).ok());
  const KvAppend unknown[] = {{x + 100, t}};
  Result<KvRoom> r = kv.reserve(unknown);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unknown sequence"), std::string::npos);
  EXPECT_EQ(kv.n_tokens(x), 0);
  EXPECT_FALSE(kv.free_sequence(x + 100).ok());
  EXPECT_FALSE(kv.publish(x + 100).ok());
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvStore, FreeReturnsEveryPage) {
  KvStore kv = make_store(small_config(3, 30));
  const std::vector<int32_t> t = kv_test::iota_tokens(13);
  const KvSeqId s = kv.add_sequence({}).value().seq;
  ASSERT_TRUE(append(kv, s, t, /*publish=*/false));
  EXPECT_EQ(kv.pool().n_used(), 12);
  ASSERT_TRUE(kv.free_sequence(s).ok());
  EXPECT_FALSE(kv.has_sequence(s));
  EXPECT_EQ(kv.pool().n_free(), 30);
  SIEVE_EXPECT_KV_OK(kv);
}

TEST(KvStore, Statistics) {
  KvConfig c =
      small_config(3, 40, 4, {KvCapacity::full(), KvCapacity::sliding(8, 2), KvCapacity::full()});
  KvStore kv = make_store(c);
  const KvStats st0 = kv.stats();
  EXPECT_EQ(st0.n_pages_total, 40);
  EXPECT_EQ(st0.n_pages_free, 40);
  EXPECT_EQ(st0.token_bytes, 2 * 2 * 4 * 4 + 4);
  EXPECT_EQ(st0.page_bytes, 4 * st0.token_bytes);
  EXPECT_EQ(st0.n_stream_full, 2);
  EXPECT_EQ(st0.n_stream_window, 1);
  EXPECT_EQ(st0.bytes_per_token_full, 2 * st0.token_bytes);
  EXPECT_EQ(st0.max_bytes_per_seq_window, (1 + 2 + 1) * st0.page_bytes);

  const std::vector<int32_t> t = kv_test::iota_tokens(10);
  const KvSeqId a = kv.add_sequence(t).value().seq;
  ASSERT_TRUE(append(kv, a, t));
  const KvSeqId b = kv.add_sequence(t).value().seq;  // shares 2 full pages per stream
  const KvStats st = kv.stats();
  EXPECT_EQ(st.n_pages_used, 9);
  EXPECT_EQ(st.n_sequences, 2);
  EXPECT_EQ(st.n_prefix_queries, 2);
  EXPECT_EQ(st.n_prefix_query_tokens, 20);
  EXPECT_EQ(st.n_prefix_hit_tokens, 8);
  EXPECT_EQ(kv.seq_bytes(a), 9 * st.page_bytes);
  EXPECT_EQ(kv.seq_exclusive_bytes(a), 3 * st.page_bytes);  // the partial third pages
  EXPECT_EQ(kv.seq_bytes(b), 6 * st.page_bytes);
  EXPECT_EQ(kv.seq_exclusive_bytes(b), 0);
  SIEVE_EXPECT_KV_OK(kv);
}

}  // namespace
}  // namespace sieve

#include "kv/kv_page_pool.h"

#include <gtest/gtest.h>

#include "kv/kv_test_util.h"

namespace sieve {
namespace {

KvDigest digest(int32_t v) {
  const std::vector<int32_t> t = {v};
  return kv_page_digest({}, t, kv_salt_digest("pool-test", ""));
}

KvPagePool make_pool(int32_t n_pages) {
  const KvGeometry g = make_kv_geometry(kv_test::small_config(2, n_pages)).value();
  return KvPagePool::create(g).value();
}

#define EXPECT_POOL_OK(pool)                \
  do {                                      \
    const Status st_ = (pool).check();      \
    ASSERT_TRUE(st_.ok()) << st_.message(); \
  } while (0)

TEST(KvPagePool, HandsOutLowIdsFirstThenMostRecentlyFreed) {
  KvPagePool pool = make_pool(4);
  EXPECT_EQ(pool.n_pages(), 4);
  EXPECT_EQ(pool.allocate(0), 0);
  EXPECT_EQ(pool.allocate(0), 1);
  EXPECT_EQ(pool.allocate(1), 2);
  EXPECT_EQ(pool.stream_of(2), 1);
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_EQ(pool.n_used(), 3);
  EXPECT_POOL_OK(pool);
  pool.release(1);
  EXPECT_EQ(pool.state(1), KvPageState::free);
  EXPECT_EQ(pool.allocate(0), 1);  // LIFO: the page just freed
  EXPECT_EQ(pool.allocate(0), 3);
  EXPECT_EQ(pool.n_available(), 0);
  EXPECT_POOL_OK(pool);
}

TEST(KvPagePool, ReferenceCounts) {
  KvPagePool pool = make_pool(2);
  const int32_t p = pool.allocate(0);
  pool.retain(p);
  pool.retain(p);
  EXPECT_EQ(pool.refcount(p), 3);
  pool.release(p);
  pool.release(p);
  EXPECT_EQ(pool.state(p), KvPageState::used);
  pool.release(p);
  EXPECT_EQ(pool.state(p), KvPageState::free);
  EXPECT_EQ(pool.refcount(p), 0);
  EXPECT_POOL_OK(pool);
}

TEST(KvPagePool, HashedPagesAreCachedAndReclaimedInLruOrder) {
  KvPagePool pool = make_pool(5);
  for (int32_t i = 0; i < 5; ++i) ASSERT_EQ(pool.allocate(i % 2), i);
  EXPECT_TRUE(pool.register_hash(0, digest(0)));
  EXPECT_FALSE(pool.register_hash(0, digest(9)));  // already hashed
  EXPECT_FALSE(pool.register_hash(2, digest(0)));  // same stream 0, same content: keep page 0
  EXPECT_TRUE(pool.register_hash(1, digest(0)));   // stream 1: a different key
  EXPECT_TRUE(pool.register_hash(2, digest(2)));
  EXPECT_TRUE(pool.register_hash(4, digest(4)));
  EXPECT_EQ(pool.lookup(0, digest(0)), 0);
  EXPECT_EQ(pool.lookup(1, digest(0)), 1);
  EXPECT_EQ(pool.lookup(1, digest(2)), -1);
  EXPECT_POOL_OK(pool);

  // release order 2, 0, 4 -> LRU 2, 0, 4; page 3 has no hash -> free
  pool.release(2);
  pool.release(0);
  pool.release(3);
  pool.release(4);
  EXPECT_EQ(pool.n_cached(), 3);
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_EQ(pool.lru_order(), (std::vector<int32_t>{2, 0, 4}));
  EXPECT_EQ(pool.lookup(0, digest(0)), 0);  // cached content is still findable
  EXPECT_POOL_OK(pool);

  // a hit revives page 0: it leaves the LRU, and returns to its most recent end later
  pool.retain(0);
  EXPECT_EQ(pool.state(0), KvPageState::used);
  EXPECT_EQ(pool.lru_order(), (std::vector<int32_t>{2, 4}));
  pool.release(0);
  EXPECT_EQ(pool.lru_order(), (std::vector<int32_t>{2, 4, 0}));

  // free pages go first, then the least recently cached, whose hash is forgotten
  EXPECT_EQ(pool.allocate(0), 3);
  EXPECT_EQ(pool.allocate(0), 2);
  EXPECT_EQ(pool.lookup(0, digest(2)), -1);
  EXPECT_FALSE(pool.has_hash(2));
  EXPECT_EQ(pool.allocate(1), 4);
  EXPECT_EQ(pool.stream_of(4), 1);
  EXPECT_EQ(pool.lru_order(), (std::vector<int32_t>{0}));
  EXPECT_POOL_OK(pool);

  pool.forget_hash(1);
  EXPECT_EQ(pool.lookup(1, digest(0)), -1);
  pool.release(1);
  EXPECT_EQ(pool.state(1), KvPageState::free);
  EXPECT_POOL_OK(pool);
}

TEST(KvPagePool, ArenasAreAlignedAndDisjoint) {
  KvConfig c = kv_test::small_config(1, 8);
  c.sketch_dim = 3;
  c.n_token_scores = 2;
  const KvGeometry g = make_kv_geometry(c).value();
  KvPagePool pool = KvPagePool::create(g).value();
  const KvArenas& a = pool.arenas();
  for (const void* p : {static_cast<const void*>(a.k), static_cast<const void*>(a.v),
                        static_cast<const void*>(a.sketch), static_cast<const void*>(a.scores),
                        static_cast<const void*>(a.pos)})
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  // write every slot of every arena; ASan reports any overlap or overrun
  const int64_t n_slots = int64_t{g.n_pages} * g.page_size;
  for (int64_t s = 0; s < n_slots; ++s) {
    std::fill_n(reinterpret_cast<float*>(a.k_row(s)), g.n_head * g.head_dim, 1.0f);
    std::fill_n(reinterpret_cast<float*>(a.v_row(s)), g.n_head * g.head_dim, 2.0f);
    std::fill_n(a.sketch_row(s), g.n_head * g.sketch_dim, 3.0f);
    std::fill_n(a.scores_row(s), g.n_token_scores, 4.0f);
    a.pos[s] = static_cast<int32_t>(s);
  }
  EXPECT_EQ(reinterpret_cast<float*>(a.k_row(n_slots - 1))[0], 1.0f);
  EXPECT_EQ(a.sketch_row(5)[0], 3.0f);
}

}  // namespace
}  // namespace sieve

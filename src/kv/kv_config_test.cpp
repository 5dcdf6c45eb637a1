#include <gtest/gtest.h>

#include "kv/kv_config.h"
#include "kv/kv_hash.h"

namespace sieve {
namespace {

KvConfig base() {
  KvConfig c;
  c.n_layer = 4;
  c.n_kv_head = 8;
  c.head_dim = 128;
  c.page_size = 16;
  c.budget_bytes = int64_t{1} << 30;
  return c;
}

TEST(KvConfig, DerivesGeometryFromTheBudget) {
  KvConfig c = base();
  c.sketch_dim = 16;
  c.n_token_scores = 1;
  const KvGeometry g = make_kv_geometry(c).value();
  EXPECT_EQ(g.n_stream, 4);
  EXPECT_EQ(g.n_head, 8);
  EXPECT_EQ(g.kv_row_bytes, 8 * 128 * 4);
  // K + V + sketch (8 heads x 16) + one score + position
  EXPECT_EQ(g.token_bytes, 2 * 4096 + 8 * 16 * 4 + 4 + 4);
  EXPECT_EQ(g.page_bytes, 16 * g.token_bytes);
  EXPECT_EQ(g.n_pages, (int64_t{1} << 30) / g.page_bytes);
  ASSERT_EQ(g.capacity.size(), 4u);
  EXPECT_FALSE(g.capacity[3].is_window());
  EXPECT_NE(describe(g).find("4 full"), std::string::npos);

  c.dtype = KvDtype::f16;
  EXPECT_EQ(make_kv_geometry(c)->kv_row_bytes, 8 * 128 * 2);
}

TEST(KvConfig, HeadGroupsSplitLayersIntoStreams) {
  KvConfig c = base();
  c.n_head_group = 4;
  c.capacity = {KvCapacity::full(), KvCapacity::sliding(64, 4), KvCapacity::full(),
                KvCapacity::full()};  // per layer: every group of layer 1 is a window
  const KvGeometry g = make_kv_geometry(c).value();
  EXPECT_EQ(g.n_stream, 16);
  EXPECT_EQ(g.n_head, 2);
  EXPECT_EQ(g.stream(1, 3), 7);
  EXPECT_EQ(g.layer_of(7), 1);
  EXPECT_EQ(g.group_of(7), 3);
  for (int32_t s = 0; s < 16; ++s) EXPECT_EQ(g.capacity[s].is_window(), g.layer_of(s) == 1) << s;

  // per stream: RTPurbo-style, group 0 of each layer full, the others window-only
  c.capacity.clear();
  for (int32_t s = 0; s < 16; ++s)
    c.capacity.push_back(s % 4 == 0 ? KvCapacity::full() : KvCapacity::sliding(128));
  const KvGeometry g2 = make_kv_geometry(c).value();
  EXPECT_FALSE(g2.capacity[4].is_window());
  EXPECT_TRUE(g2.capacity[5].is_window());
}

TEST(KvConfig, RejectsBadFieldsNamingThem) {
  auto fails_with = [](KvConfig c, const char* field) {
    Result<KvGeometry> g = make_kv_geometry(c);
    ASSERT_FALSE(g.ok()) << field;
    EXPECT_NE(g.message().find(field), std::string::npos) << g.message();
  };
  KvConfig c = base();
  c.n_layer = 0;
  fails_with(c, "n_layer");
  c = base();
  c.head_dim = -1;
  fails_with(c, "head_dim");
  c = base();
  c.n_head_group = 3;
  fails_with(c, "n_head_group");
  c = base();
  c.page_size = 0;
  fails_with(c, "page_size");
  c = base();
  c.budget_bytes = 100;
  fails_with(c, "budget_bytes");
  c = base();
  c.capacity = {KvCapacity::full(), KvCapacity::full()};
  fails_with(c, "capacity");
  c = base();
  c.capacity.assign(4, KvCapacity::sliding(0));
  fails_with(c, "window");
  c = base();
  c.sketch_dim = -2;
  fails_with(c, "sketch_dim");
}

TEST(KvHash, ChainDependsOnParentTokensAndSalt) {
  const KvDigest salt = kv_salt_digest("model-a", "");
  const std::vector<int32_t> t1 = {1, 2, 3, 4}, t2 = {1, 2, 3, 5};
  const KvDigest a = kv_page_digest({}, t1, salt);
  EXPECT_EQ(a, kv_page_digest({}, t1, salt));  // deterministic
  EXPECT_NE(a, kv_page_digest({}, t2, salt));
  EXPECT_NE(a, kv_page_digest({}, t1, kv_salt_digest("model-b", "")));
  EXPECT_NE(a, kv_page_digest({}, t1, kv_salt_digest("model-a", "tenant")));
  // the same page after a different parent is a different key
  const KvDigest b1 = kv_page_digest(a, t1, salt);
  const KvDigest b2 = kv_page_digest(kv_page_digest({}, t2, salt), t1, salt);
  EXPECT_NE(b1, b2);
  // salt fields are length-delimited
  EXPECT_NE(kv_salt_digest("ab", "c"), kv_salt_digest("a", "bc"));
  // token ids are hashed as fixed-width integers, not concatenated digits
  EXPECT_NE(kv_page_digest({}, std::vector<int32_t>{1, 23}, salt),
            kv_page_digest({}, std::vector<int32_t>{12, 3}, salt));
  EXPECT_EQ(a.hex().size(), 64u);
}

TEST(KvHash, MatchesAnIndependentSha256OfTheDocumentedLayout) {
  // Golden values from Python's hashlib over the byte layout in kv_hash.h.
  const KvDigest salt = kv_salt_digest("model-a", "");
  EXPECT_EQ(kv_page_digest({}, std::vector<int32_t>{1, 2, 3, 4}, salt).hex(),
            "77962f387d5896f02179bfb369d167b4374dd845fd74c899e5c90ddabe649df3");
  EXPECT_EQ(kv_page_digest({}, std::vector<int32_t>{7, -1}, salt).hex(),
            "a4f4292162089b99c140d097a98541bc82756151581d4178a8453402c90f291a");
}

}  // namespace
}  // namespace sieve

// The KV budget a model needs: window layers also hold one step's chunk before the window
// slides past it (a Gemma-shaped prompt filling the context in big chunks used to run out).
#include "engine/kv_binding.h"

#include <gtest/gtest.h>

namespace sieve {
namespace {

ModelHParams hybrid() {
  ModelHParams hp;
  hp.n_layer = 6;
  hp.n_head = 2;
  hp.n_head_kv = 1;
  hp.head_dim = 8;
  hp.sliding_window = 64;
  hp.layer_kind = {LayerKind::sliding, LayerKind::sliding, LayerKind::full,
                   LayerKind::sliding, LayerKind::sliding, LayerKind::full};
  return hp;
}

// Fills a sequence of n_ctx tokens in chunks; false when a chunk does not fit.
bool fill(const ModelHParams& hp, int64_t budget, int32_t n_ctx, int32_t chunk) {
  KvConfig c = kv_config_for(hp, budget, 16, "t");
  auto store = KvStore::create(c);
  EXPECT_TRUE(store.ok()) << store.message();
  KvStore& kv = store.value();
  const KvSeqId seq = kv.add_sequence({}).value().seq;
  std::vector<int32_t> toks(chunk, 7);
  for (int32_t done = 0; done < n_ctx; done += chunk) {
    const int32_t n = std::min(chunk, n_ctx - done);
    const KvAppend app{seq, std::span<const int32_t>(toks.data(), n)};
    auto room = kv.reserve(std::span<const KvAppend>(&app, 1));
    EXPECT_TRUE(room.ok());
    if (!room->fits()) return false;
  }
  return true;
}

TEST(KvBudget, WindowLayersHoldOneChunk) {
  const ModelHParams hp = hybrid();
  const int32_t n_ctx = 1024;
  for (int32_t chunk : {16, 100, 512, 1024}) {
    EXPECT_TRUE(fill(hp, kv_budget_bytes(hp, n_ctx, 1, 16, 0, chunk), n_ctx, chunk)) << chunk;
  }
  // Sized for small chunks, a whole-prompt chunk does not fit (and is reported, not a crash).
  EXPECT_FALSE(fill(hp, kv_budget_bytes(hp, n_ctx, 1, 16, 0, 16), n_ctx, 1024));
  // Full-attention-only models need nothing extra.
  ModelHParams full = hp;
  full.layer_kind.assign(6, LayerKind::full);
  EXPECT_EQ(kv_budget_bytes(full, n_ctx, 1, 16, 0, 16),
            kv_budget_bytes(full, n_ctx, 1, 16, 0, 1024));
  // The chunk room is per step, not per sequence.
  EXPECT_LT(kv_budget_bytes(hp, n_ctx, 4, 16, 0, 512),
            4 * kv_budget_bytes(hp, n_ctx, 1, 16, 0, 512));
}

// The KV heads of one stream share its page tables and differ in head_off; every head of every
// stream reads its own rows (each row holds its stream, token and head).
TEST(HeadViewTables, HeadsOfAStreamShareTablesAndReadTheirRows) {
  KvConfig c;
  c.n_layer = 2;
  c.n_kv_head = 3;
  c.head_dim = 8;
  c.page_size = 16;
  c.dtype = KvDtype::f16;
  c.budget_bytes = int64_t{64} << 20;
  c.hash_salt = "t";
  auto store = KvStore::create(c);
  ASSERT_TRUE(store.ok()) << store.message();
  KvStore& kv = store.value();
  const KvSeqId seq = kv.add_sequence({}).value().seq;
  std::vector<int32_t> toks(40, 7);
  const KvAppend app{seq, std::span<const int32_t>(toks)};
  ASSERT_TRUE(kv.reserve(std::span<const KvAppend>(&app, 1)).value().fits());
  auto code = [](int s, int j, int h, int x) {
    return static_cast<uint16_t>(((s * 64 + j) * 4 + h) * 8 + x);
  };
  for (int s = 0; s < 2; ++s) {
    for (int j = 0; j < 40; ++j) {
      const KvRowRef r = kv.row(seq, s, j);
      for (int h = 0; h < 3; ++h) {
        for (int x = 0; x < 8; ++x) {
          r.k_f16()[h * 8 + x] = code(s, j, h, x);
          r.v_f16()[h * 8 + x] = static_cast<uint16_t>(code(s, j, h, x) + 1);
        }
      }
    }
  }
  HeadViewTables t;
  for (int round = 0; round < 2; ++round) {  // and again after clear()
    t.clear();
    for (int s = 0; s < 2; ++s) {
      std::vector<KvHeadView> views;
      for (int h = 0; h < 3; ++h) views.push_back(t.make(kv.seq_view(seq, s), h));
      EXPECT_EQ(views[1].k_pages, views[0].k_pages);
      EXPECT_EQ(views[2].v_pages, views[0].v_pages);
      for (int h = 0; h < 3; ++h) {
        ASSERT_EQ(views[h].n_tokens, 40);
        for (int j = 0; j < 40; ++j) {
          for (int x = 0; x < 8; ++x) {
            ASSERT_EQ(views[h].k_row(j)[x], code(s, j, h, x)) << s << " " << j << " " << h;
            ASSERT_EQ(views[h].v_row(j)[x], code(s, j, h, x) + 1) << s << " " << j << " " << h;
          }
          ASSERT_EQ(views[h].position(j), j);
        }
      }
    }
  }
}

}  // namespace
}  // namespace sieve

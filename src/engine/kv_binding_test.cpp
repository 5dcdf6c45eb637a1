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
  EXPECT_EQ(kv_budget_bytes(full, n_ctx, 1, 16, 0, 16), kv_budget_bytes(full, n_ctx, 1, 16, 0, 1024));
  // The chunk room is per step, not per sequence.
  EXPECT_LT(kv_budget_bytes(hp, n_ctx, 4, 16, 0, 512), 4 * kv_budget_bytes(hp, n_ctx, 1, 16, 0, 512));
}

}  // namespace
}  // namespace sieve

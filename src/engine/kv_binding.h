// Glue between the paged KV store (src/kv) and the model: the store configuration a model
// needs (one stream per layer; sliding-window layers keep only their window), and
// attention views of one head of a stored sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/attention.h"
#include "kv/kv_store.h"
#include "model/hparams.h"

namespace sieve {

// Bytes a model's KV needs to hold n_seq sequences of n_ctx tokens each (full layers hold
// everything; window layers at most their window plus a page of slack), rounded up to pages,
// plus room for one step of max_chunk tokens in every window layer (a chunk's tokens are all
// stored before the window slides past them: a 32K UniPrefill chunk needs 32K there).
// sketch_dim: floats of sketch keys per KV head per token on full-attention layers.
// layout: per-layer capacities to size for instead of the model's (kv_layout_for: RTPurbo's
// window-only layers); window entries hold their sinks + window + slack.
int64_t kv_budget_bytes(const ModelHParams& hp, int64_t n_ctx, int32_t n_seq, int32_t page_size,
                        int32_t sketch_dim = 0, int64_t max_chunk = 512,
                        const std::vector<KvCapacity>* layout = nullptr);

// A layout (per-stream capacities, kv_layout_for) has n_layer entries (one stream per layer)
// or n_layer * n_head_kv (one stream per KV head: RTPurbo's window-only KV groups inside
// layers that keep other groups whole). layout_groups() says which (1 or n_head_kv),
// layout_at() gives KV head h of layer il its capacity.
int32_t layout_groups(const std::vector<KvCapacity>& layout, const ModelHParams& hp);
const KvCapacity& layout_at(const std::vector<KvCapacity>& layout, const ModelHParams& hp,
                            int32_t il, int32_t h);

// KvConfig for a model: f16 K/V, one stream per layer (or per KV head, as the layout has it),
// window capacity on sliding layers.
KvConfig kv_config_for(const ModelHParams& hp, int64_t budget_bytes, int32_t page_size,
                       const std::string& hash_salt,
                       const std::vector<KvCapacity>* layout = nullptr);

// Page-pointer tables for the attention views of one step. Views stay valid until the next
// clear() or the next mutating call on the store.
class HeadViewTables {
 public:
  void clear();
  KvHeadView make(const KvSeqView& sv, int32_t head);

 private:
  // One table per view; deque-like stability via unique_ptr.
  struct Table {
    std::vector<const uint16_t*> k, v;
    std::vector<const int32_t*> pos;
  };
  std::vector<std::unique_ptr<Table>> tables_;
  size_t used_ = 0;
  const KvArenas* last_arenas_ = nullptr;  // the stream of tables_[used_ - 1]
  const int32_t* last_pages_ = nullptr;
};

}  // namespace sieve

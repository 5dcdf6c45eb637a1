#include "engine/kv_binding.h"

#include <memory>

namespace sieve {

int32_t layout_groups(const std::vector<KvCapacity>& layout, const ModelHParams& hp) {
  return hp.n_layer > 0 &&
                 static_cast<int64_t>(layout.size()) == int64_t{hp.n_layer} * hp.n_head_kv &&
                 hp.n_head_kv > 1
             ? hp.n_head_kv
             : 1;
}

const KvCapacity& layout_at(const std::vector<KvCapacity>& layout, const ModelHParams& hp,
                            int32_t il, int32_t h) {
  const int32_t G = layout_groups(layout, hp);  // 1 or n_head_kv
  return G == 1 ? layout[il] : layout[static_cast<size_t>(il) * G + h];
}

int64_t kv_budget_bytes(const ModelHParams& hp, int64_t n_ctx, int32_t n_seq, int32_t page_size,
                        int32_t sketch_dim, int64_t max_chunk,
                        const std::vector<KvCapacity>* layout) {
  const int32_t G = layout ? layout_groups(*layout, hp) : 1;
  // Per token per stream: K + V rows (f16) + sketch keys (f32) of the stream's heads + position.
  const int64_t token_bytes = (2LL * hp.kv_dim() * 2 + 4LL * sketch_dim * hp.n_head_kv) / G + 4;
  const int64_t pages_full = (n_ctx + page_size - 1) / page_size;
  int64_t pages = 0;
  for (int32_t s = 0; s < hp.n_layer * G; ++s) {
    const int32_t il = s / G;
    const LayerKind k = hp.layer_kind[il];
    const KvCapacity* cap = layout ? &(*layout)[s] : nullptr;
    const bool window = cap ? cap->is_window() : k == LayerKind::sliding;
    if (window) {
      const int32_t win = cap ? cap->window : hp.sliding_window;
      const int32_t sinks = cap ? cap->n_sink : 0;
      const int64_t w = std::min<int64_t>(n_ctx, win);
      pages += n_seq * ((w + page_size - 1) / page_size + 2);  // the window may straddle pages
      pages += n_seq * ((sinks + page_size - 1) / page_size);  // pages holding sinks stay
      // One step's chunk sits in the stream before the window slides past it.
      const int64_t extra = std::max<int64_t>(0, std::min(n_ctx, max_chunk + w) - w);
      pages += (extra + page_size - 1) / page_size;
    } else {
      pages += n_seq * pages_full;
    }
  }
  return pages * page_size * token_bytes;
}

KvConfig kv_config_for(const ModelHParams& hp, int64_t budget_bytes, int32_t page_size,
                       const std::string& hash_salt, const std::vector<KvCapacity>* layout) {
  KvConfig c;
  c.n_layer = hp.n_layer;
  c.n_kv_head = hp.n_head_kv;
  c.head_dim = hp.head_dim;
  c.n_head_group = layout ? layout_groups(*layout, hp) : 1;
  c.page_size = page_size;
  c.dtype = KvDtype::f16;
  c.budget_bytes = budget_bytes;
  c.hash_salt = hash_salt;
  if (layout) {
    c.capacity = *layout;
    return c;
  }
  for (LayerKind k : hp.layer_kind) {
    c.capacity.push_back(k == LayerKind::sliding ? KvCapacity::sliding(hp.sliding_window)
                                                 : KvCapacity::full());
  }
  return c;
}

void HeadViewTables::clear() {
  used_ = 0;
}

KvHeadView HeadViewTables::make(const KvSeqView& sv, int32_t head) {
  // The stream's heads share one table (they differ in head_off): a layer's KV heads are made
  // one after another, so the last table serves while the stream is the same.
  const bool same = used_ > 0 && last_arenas_ == sv.arenas && last_pages_ == sv.pages.data() &&
                    tables_[used_ - 1]->k.size() == sv.pages.size();
  if (!same) {
    if (used_ == tables_.size()) tables_.push_back(std::make_unique<Table>());
    Table& t = *tables_[used_++];
    const int32_t n_pages = sv.n_pages();
    t.k.resize(n_pages);
    t.v.resize(n_pages);
    t.pos.resize(n_pages);
    for (int32_t p = 0; p < n_pages; ++p) {
      t.k[p] = reinterpret_cast<const uint16_t*>(sv.k_page_head(p, 0));
      t.v[p] = reinterpret_cast<const uint16_t*>(sv.v_page_head(p, 0));
      t.pos[p] = sv.page_positions(p);
    }
    last_arenas_ = sv.arenas;
    last_pages_ = sv.pages.data();
  }
  const Table& t = *tables_[used_ - 1];
  KvHeadView v;
  v.k_pages = t.k.data();
  v.v_pages = t.v.data();
  v.pos_pages = t.pos.data();
  v.page_size = sv.page_size();
  v.row_stride = static_cast<int64_t>(sv.arenas->n_head) * sv.arenas->head_dim;
  v.head_off =
      int64_t{head} * (sv.arenas->kv_row_bytes / sv.arenas->n_head) / int64_t{sizeof(uint16_t)};
  v.n_tokens = sv.n_tokens;
  return v;
}

}  // namespace sieve

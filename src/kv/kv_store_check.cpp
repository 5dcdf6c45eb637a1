// KvStore: the invariant check and the accounting.
#include <algorithm>

#include "kv/kv_store.h"

namespace sieve {

Status KvStore::check_invariants() const {
  SIEVE_TRY(pool_.check());
  const int32_t ps = geo_.page_size;
  const KvArenas& a = pool_.arenas();
  std::vector<int32_t> refs(pool_.n_pages(), 0);
  std::vector<int64_t> seen_in(pool_.n_pages(), -1);  // last table that referenced the page
  int64_t table_id = 0;

  for (const auto& [id, seq] : seqs_) {
    const int32_t n_pos = static_cast<int32_t>(seq.tokens.size());
    if (static_cast<int64_t>(seq.page_hashes.size()) * ps > n_pos)
      return make_error("kv: sequence {} has {} chain hashes for {} tokens", id,
                        seq.page_hashes.size(), n_pos);
    if (static_cast<int32_t>(seq.streams.size()) != geo_.n_stream)
      return make_error("kv: sequence {} has {} streams", id, seq.streams.size());
    for (int32_t s = 0; s < geo_.n_stream; ++s, ++table_id) {
      const StreamTable& st = seq.streams[s];
      const int64_t n_pages = static_cast<int64_t>(st.pages.size());
      if (st.n_tokens < 0 || st.n_tokens > n_pages * ps || st.n_tokens <= (n_pages - 1) * ps)
        return make_error("kv: sequence {} stream {}: {} tokens in {} pages of {}", id, s,
                          st.n_tokens, n_pages, ps);
      if (st.n_tokens > n_pos || st.pristine_pos > n_pos || st.published_pos > st.pristine_pos)
        return make_error(
            "kv: sequence {} stream {}: held {}, pristine {}, published {} vs {} positions", id, s,
            st.n_tokens, st.pristine_pos, st.published_pos, n_pos);
      int32_t prev_pos = -1;
      for (int64_t k = 0; k < n_pages; ++k) {
        const int32_t page = st.pages[k];
        if (page < 0 || page >= pool_.n_pages())
          return make_error("kv: sequence {} stream {} holds page id {}", id, s, page);
        if (seen_in[page] == table_id)
          return make_error("kv: sequence {} stream {} holds page {} twice", id, s, page);
        seen_in[page] = table_id;
        ++refs[page];
        if (pool_.state(page) != KvPageState::used || pool_.stream_of(page) != s)
          return make_error("kv: sequence {} stream {} holds page {} in state {} of stream {}", id,
                            s, page, static_cast<int>(pool_.state(page)), pool_.stream_of(page));
        const int32_t len = k + 1 < n_pages ? ps : st.n_tokens - static_cast<int32_t>(k) * ps;
        // Only full pages are ever shared or published; appends and compaction write the
        // partial last page, which therefore must belong to this table alone.
        if (len < ps && (pool_.refcount(page) > 1 || pool_.has_hash(page)))
          return make_error("kv: sequence {} stream {}: partial page {} is shared or hashed", id, s,
                            page);
        for (int32_t o = 0; o < len; ++o) {
          const int32_t pos = a.pos[a.slot(page, o)];
          if (pos <= prev_pos || pos >= n_pos)
            return make_error("kv: sequence {} stream {}: position {} after {} (of {})", id, s, pos,
                              prev_pos, n_pos);
          prev_pos = pos;
        }
        if (pool_.has_hash(page)) {
          // A hashed page holds exactly token page j of the plain prefix.
          const int32_t fp = a.pos[a.slot(page, 0)];
          if (fp % ps != 0 || a.pos[a.slot(page, ps - 1)] != fp + ps - 1)
            return make_error("kv: sequence {} stream {}: hashed page {} is not aligned", id, s,
                              page);
          const size_t j = static_cast<size_t>(fp / ps);
          if (j < seq.page_hashes.size() && !(seq.page_hashes[j] == pool_.hash(page)))
            return make_error("kv: sequence {} stream {}: page {} hash differs from the chain", id,
                              s, page);
        }
      }
    }
  }
  for (int32_t p = 0; p < pool_.n_pages(); ++p) {
    const int32_t want = pool_.state(p) == KvPageState::used ? pool_.refcount(p) : 0;
    if (refs[p] != want)
      return make_error("kv: page {} has refcount {} but {} table references", p, want, refs[p]);
  }
  return {};
}

KvStats KvStore::stats() const {
  KvStats st;
  st.n_pages_total = pool_.n_pages();
  st.n_pages_free = pool_.n_free();
  st.n_pages_cached = pool_.n_cached();
  st.n_pages_used = pool_.n_used();
  st.page_bytes = geo_.page_bytes;
  st.token_bytes = geo_.token_bytes;
  const int64_t ps = geo_.page_size;
  for (const KvCapacity& cap : geo_.capacity) {
    if (cap.is_window()) {
      ++st.n_stream_window;
      // sink pages + pages spanning positions [p - window, p) + the page being filled
      const int64_t pages = (cap.n_sink + ps - 1) / ps + (cap.window + ps - 1) / ps + 1;
      st.max_bytes_per_seq_window += pages * geo_.page_bytes;
    } else {
      ++st.n_stream_full;
    }
  }
  st.bytes_per_token_full = geo_.token_bytes * st.n_stream_full;
  st.n_sequences = n_sequences();
  st.n_prefix_queries = n_prefix_queries_;
  st.n_prefix_query_tokens = n_prefix_query_tokens_;
  st.n_prefix_hit_tokens = n_prefix_hit_tokens_;
  return st;
}

int64_t KvStore::seq_bytes(KvSeqId id) const {
  int64_t n = 0;
  for (const StreamTable& st : get(id).streams) n += static_cast<int64_t>(st.pages.size());
  return n * geo_.page_bytes;
}

int64_t KvStore::seq_exclusive_bytes(KvSeqId id) const {
  int64_t n = 0;
  for (const StreamTable& st : get(id).streams)
    for (int32_t p : st.pages) n += pool_.refcount(p) == 1 ? 1 : 0;
  return n * geo_.page_bytes;
}

}  // namespace sieve

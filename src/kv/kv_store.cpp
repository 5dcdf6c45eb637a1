// KvStore: sequences, prefix matching, plan-then-apply appends, publishing, views.
// Eviction lives in kv_evict.cpp, invariants and statistics in kv_store_check.cpp.
#include "kv/kv_store.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "core/assert.h"

namespace sieve {
namespace {

// Positions are int32 in the arenas; keep sequences far from overflow.
constexpr int64_t kMaxSeqTokens = int64_t{1} << 30;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

KvStore::KvStore(KvGeometry geo, KvPagePool pool) : geo_(std::move(geo)), pool_(std::move(pool)) {}

Result<KvStore> KvStore::create(const KvConfig& config) {
  Result<KvGeometry> geo = make_kv_geometry(config);
  if (!geo.ok()) return geo.error();
  Result<KvPagePool> pool = KvPagePool::create(*geo);
  if (!pool.ok()) return pool.error();
  return KvStore(std::move(geo).value(), std::move(pool).value());
}

KvStore::Sequence& KvStore::get(KvSeqId seq) {
  auto it = seqs_.find(seq);
  SIEVE_ASSERT(it != seqs_.end());  // ids come from the engine, which must not lose track
  return it->second;
}

const KvStore::Sequence& KvStore::get(KvSeqId seq) const {
  auto it = seqs_.find(seq);
  SIEVE_ASSERT(it != seqs_.end());
  return it->second;
}

int32_t KvStore::n_tokens(KvSeqId seq) const {
  return static_cast<int32_t>(get(seq).tokens.size());
}

std::span<const int32_t> KvStore::tokens(KvSeqId seq) const {
  return get(seq).tokens;
}

int32_t KvStore::stream_len(KvSeqId seq, int32_t stream) const {
  SIEVE_ASSERT(stream >= 0 && stream < geo_.n_stream);
  return get(seq).streams[stream].n_tokens;
}

// ---- window geometry ----

KvStore::Drop KvStore::window_drop(const StreamTable& st, const KvCapacity& cap,
                                   int32_t next_pos) const {
  if (!cap.is_window() || st.pages.size() < 2) return {};
  // The last page receives appends and is never dropped, so every dropped page is full and
  // the table stays dense. Positions increase along the table, so "holds a sink" is true on
  // a leading run of pages and "invisible to every query at >= next_pos" on a run after it.
  const auto last = st.pages.end() - 1;
  const auto sink_end = std::partition_point(st.pages.begin(), last,
                                             [&](int32_t p) { return first_pos(p) < cap.n_sink; });
  const int64_t visible_from = int64_t{next_pos} - cap.window;
  const auto drop_end = std::partition_point(
      sink_end, last, [&](int32_t p) { return last_full_pos(p) < visible_from; });
  return {static_cast<int32_t>(sink_end - st.pages.begin()),
          static_cast<int32_t>(drop_end - st.pages.begin())};
}

bool KvStore::window_keeps(const KvCapacity& cap, int32_t n_pages, int32_t j) const {
  // The same rule as window_drop() for aligned pages when the next position is
  // n_pages * page_size: keep page j if it holds a sink or a visible position.
  const int64_t ps = geo_.page_size;
  const int64_t visible_from = int64_t{n_pages} * ps - cap.window;
  return int64_t{j} * ps < cap.n_sink || (int64_t{j} + 1) * ps - 1 >= visible_from;
}

// ---- prefix matching ----

KvStore::PrefixMatch KvStore::match_prefix(std::span<const int32_t> prompt,
                                           std::string_view salt) const {
  PrefixMatch pm;
  pm.salt = kv_salt_digest(geo_.hash_salt, salt);
  const int32_t ps = geo_.page_size;
  if (!geo_.prefix_cache || prompt.empty()) return pm;
  // One token must remain to compute (the step that yields the first logits).
  const int32_t max_pages = static_cast<int32_t>((prompt.size() - 1) / ps);

  std::vector<int32_t> full, window;
  for (int32_t s = 0; s < geo_.n_stream; ++s)
    (geo_.capacity[s].is_window() ? window : full).push_back(s);

  // Full streams need every page of the prefix: the chain stops at the first page that
  // some full stream lacks.
  KvDigest parent{};
  int32_t m = 0;
  for (; m < max_pages; ++m) {
    const KvDigest d = kv_page_digest(parent, prompt.subspan(int64_t{m} * ps, ps), pm.salt);
    bool all = true;
    for (int32_t s : full) {
      if (pool_.lookup(s, d) < 0) {
        all = false;
        break;
      }
    }
    if (!all) break;
    pm.hashes.push_back(d);
    parent = d;
  }

  // Window streams need only the pages window_keeps() names, which move with the prefix
  // length: find the longest prefix <= m that every window stream can supply.
  if (!window.empty() && m > 0) {
    std::vector<std::vector<int32_t>> present(window.size());  // prefix sums of hits
    for (size_t w = 0; w < window.size(); ++w) {
      present[w].assign(m + 1, 0);
      for (int32_t j = 0; j < m; ++j)
        present[w][j + 1] = present[w][j] + (pool_.lookup(window[w], pm.hashes[j]) >= 0 ? 1 : 0);
    }
    auto supplies = [&](size_t w, int32_t mm) {
      const KvCapacity& cap = geo_.capacity[window[w]];
      const int32_t n_sink_pages =
          static_cast<int32_t>(std::min<int64_t>(mm, ceil_div(cap.n_sink, ps)));
      const int64_t visible_from = int64_t{mm} * ps - cap.window;
      const int32_t first_visible = static_cast<int32_t>(visible_from <= 0 ? 0 : visible_from / ps);
      const int32_t lo = std::max(first_visible, n_sink_pages);
      const std::vector<int32_t>& pre = present[w];
      return pre[n_sink_pages] == n_sink_pages && (lo >= mm || pre[mm] - pre[lo] == mm - lo);
    };
    for (; m > 0; --m) {
      bool ok = true;
      for (size_t w = 0; w < window.size() && ok; ++w) ok = supplies(w, m);
      if (ok) break;
    }
  }
  pm.n_pages = m;
  return pm;
}

int32_t KvStore::peek_prefix(std::span<const int32_t> prompt, std::string_view salt) const {
  return match_prefix(prompt, salt).n_pages * geo_.page_size;
}

Result<KvSeqAdd> KvStore::add_sequence(std::span<const int32_t> prompt, std::string_view salt) {
  if (static_cast<int64_t>(prompt.size()) > kMaxSeqTokens)
    return make_error("kv: prompt of {} tokens is longer than the {} supported", prompt.size(),
                      kMaxSeqTokens);
  const PrefixMatch pm = match_prefix(prompt, salt);
  const int32_t ps = geo_.page_size;
  const int32_t n_cached = pm.n_pages * ps;

  Sequence seq;
  seq.salt = pm.salt;
  seq.tokens.assign(prompt.begin(), prompt.begin() + n_cached);
  seq.page_hashes.assign(pm.hashes.begin(), pm.hashes.begin() + pm.n_pages);
  seq.streams.resize(geo_.n_stream);
  for (int32_t s = 0; s < geo_.n_stream; ++s) {
    StreamTable& st = seq.streams[s];
    const KvCapacity& cap = geo_.capacity[s];
    for (int32_t j = 0; j < pm.n_pages; ++j) {
      if (cap.is_window() && !window_keeps(cap, pm.n_pages, j)) continue;
      const int32_t page = pool_.lookup(s, pm.hashes[j]);
      SIEVE_ASSERT(page >= 0);  // match_prefix found it and nothing ran in between
      pool_.retain(page);
      st.pages.push_back(page);
    }
    st.n_tokens = static_cast<int32_t>(st.pages.size()) * ps;
    st.pristine_pos = st.published_pos = n_cached;
  }
  ++n_prefix_queries_;
  n_prefix_query_tokens_ += static_cast<int64_t>(prompt.size());
  n_prefix_hit_tokens_ += n_cached;
  const KvSeqId id = next_id_++;
  seqs_.emplace(id, std::move(seq));
  return KvSeqAdd{id, n_cached};
}

Status KvStore::free_sequence(KvSeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return make_error("kv: free of unknown sequence {}", id);
  Sequence& seq = it->second;
  size_t max_pages = 0;
  for (const StreamTable& st : seq.streams) max_pages = std::max(max_pages, st.pages.size());
  // Deepest page index first over all streams: the LRU list then reclaims tails before heads.
  for (size_t k = max_pages; k-- > 0;)
    for (const StreamTable& st : seq.streams)
      if (k < st.pages.size()) pool_.release(st.pages[k]);
  seqs_.erase(it);
  return {};
}

// ---- steps ----

Result<KvRoom> KvStore::plan_step(std::span<const KvAppend> step, std::vector<Drop>* drops) const {
  const int32_t ps = geo_.page_size;
  if (drops) drops->assign(step.size() * geo_.n_stream, Drop{});
  std::unordered_set<KvSeqId> seen;
  std::unordered_map<int32_t, int32_t> n_dropped;  // page -> references the step releases
  int64_t need = 0;
  for (size_t i = 0; i < step.size(); ++i) {
    const KvAppend& item = step[i];
    auto it = seqs_.find(item.seq);
    if (it == seqs_.end()) return make_error("kv reserve: unknown sequence {}", item.seq);
    if (!seen.insert(item.seq).second)
      return make_error("kv reserve: sequence {} appears twice in one step", item.seq);
    const Sequence& seq = it->second;
    const int64_t n_new = static_cast<int64_t>(item.tokens.size());
    if (static_cast<int64_t>(seq.tokens.size()) + n_new > kMaxSeqTokens)
      return make_error("kv reserve: sequence {} would reach {} tokens, more than {}", item.seq,
                        seq.tokens.size() + n_new, kMaxSeqTokens);
    const int32_t next_pos = static_cast<int32_t>(seq.tokens.size());
    for (int32_t s = 0; s < geo_.n_stream; ++s) {
      const StreamTable& st = seq.streams[s];
      const Drop d = window_drop(st, geo_.capacity[s], next_pos);
      for (int32_t k = d.begin; k < d.end; ++k) ++n_dropped[st.pages[k]];
      const int64_t n_pages_left = static_cast<int64_t>(st.pages.size()) - (d.end - d.begin);
      const int64_t held = st.n_tokens - int64_t{d.end - d.begin} * ps;  // dropped pages are full
      const int64_t space = n_pages_left * ps - held;
      if (n_new > space) need += ceil_div(n_new - space, ps);
      if (drops) (*drops)[i * geo_.n_stream + s] = d;
    }
  }
  int64_t n_freed = 0;  // pages whose every reference the step drops come back before allocation
  for (const auto& [page, n] : n_dropped) n_freed += pool_.refcount(page) == n ? 1 : 0;
  return KvRoom{need, int64_t{pool_.n_available()} + n_freed};
}

Result<KvRoom> KvStore::plan(std::span<const KvAppend> step) const {
  return plan_step(step, nullptr);
}

Result<KvRoom> KvStore::reserve(std::span<const KvAppend> step) {
  std::vector<Drop> drops;
  Result<KvRoom> room = plan_step(step, &drops);
  if (!room.ok() || !room->fits()) return room;
  const int32_t ps = geo_.page_size;
  const KvArenas& a = pool_.arenas();

  // Window drops first: the pages they free are part of what the allocations below count on.
  for (size_t i = 0; i < step.size(); ++i) {
    Sequence& seq = get(step[i].seq);
    for (int32_t s = 0; s < geo_.n_stream; ++s) {
      const Drop d = drops[i * geo_.n_stream + s];
      if (d.end == d.begin) continue;
      StreamTable& st = seq.streams[s];
      for (int32_t k = d.begin; k < d.end; ++k) pool_.release(st.pages[k]);  // oldest first
      st.pages.erase(st.pages.begin() + d.begin, st.pages.begin() + d.end);
      st.n_tokens -= (d.end - d.begin) * ps;
    }
  }
  for (const KvAppend& item : step) {
    Sequence& seq = get(item.seq);
    const int32_t next_pos = static_cast<int32_t>(seq.tokens.size());
    const int32_t n_new = static_cast<int32_t>(item.tokens.size());
    for (int32_t s = 0; s < geo_.n_stream; ++s) {
      StreamTable& st = seq.streams[s];
      for (int32_t j = 0; j < n_new; ++j) {
        const int32_t idx = st.n_tokens + j;
        if (idx == static_cast<int32_t>(st.pages.size()) * ps)
          st.pages.push_back(pool_.allocate(s));
        const int64_t slot = a.slot(st.pages[idx / ps], idx % ps);
        a.pos[slot] = next_pos + j;
        if (a.scores) std::fill_n(a.scores_row(slot), a.n_token_scores, 0.0f);
      }
      // Only a stream that holds the whole plain prefix stays pristine as it grows.
      if (st.pristine_pos == next_pos) st.pristine_pos = next_pos + n_new;
      st.n_tokens += n_new;
    }
    seq.tokens.insert(seq.tokens.end(), item.tokens.begin(), item.tokens.end());
  }
  return room;
}

Status KvStore::publish(KvSeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return make_error("kv publish: unknown sequence {}", id);
  if (!geo_.prefix_cache) return {};
  Sequence& seq = it->second;
  const int32_t ps = geo_.page_size;
  const int32_t n_full_pos = static_cast<int32_t>(seq.tokens.size()) / ps * ps;

  int32_t max_limit = 0;
  for (const StreamTable& st : seq.streams)
    if (st.published_pos < std::min(st.pristine_pos, n_full_pos))
      max_limit = std::max(max_limit, std::min(st.pristine_pos, n_full_pos));
  // Extend the chain only as far as some stream can use it.
  while (static_cast<int32_t>(seq.page_hashes.size()) * ps < max_limit) {
    const size_t j = seq.page_hashes.size();
    const KvDigest parent = j == 0 ? KvDigest{} : seq.page_hashes[j - 1];
    seq.page_hashes.push_back(
        kv_page_digest(parent, std::span<const int32_t>(seq.tokens).subspan(j * ps, ps), seq.salt));
  }

  for (StreamTable& st : seq.streams) {
    const int32_t limit = std::min(st.pristine_pos, n_full_pos);
    if (st.published_pos >= limit) continue;
    auto k = std::partition_point(st.pages.begin(), st.pages.end(),
                                  [&](int32_t p) { return first_pos(p) < st.published_pos; });
    for (; k != st.pages.end(); ++k) {
      const bool full =
          k + 1 != st.pages.end() || st.n_tokens == static_cast<int32_t>(st.pages.size()) * ps;
      const int32_t fp = first_pos(*k);
      if (!full || fp + ps > limit) break;
      SIEVE_ASSERT(fp % ps == 0);  // pristine tokens sit at aligned slots
      const KvDigest& d = seq.page_hashes[fp / ps];
      if (pool_.has_hash(*k)) {
        SIEVE_ASSERT(pool_.hash(*k) == d);
      } else {
        // false when another page already holds this content (two sequences computed the
        // same prefix at once): that copy stays unhashed and is freed, not cached.
        (void)pool_.register_hash(*k, d);
      }
    }
    st.published_pos = limit;
  }
  return {};
}

// ---- rows and views ----

KvRowRef KvStore::row(KvSeqId seq, int32_t stream, int32_t index) {
  SIEVE_ASSERT(stream >= 0 && stream < geo_.n_stream);
  const StreamTable& st = get(seq).streams[stream];
  SIEVE_ASSERT(index >= 0 && index < st.n_tokens);
  const int32_t page = st.pages[index / geo_.page_size];
  // Shared or published pages hold finished prefix tokens that other sequences may read.
  SIEVE_ASSERT(pool_.refcount(page) == 1 && !pool_.has_hash(page));
  const KvArenas& a = pool_.arenas();
  const int64_t slot = a.slot(page, index % geo_.page_size);
  return KvRowRef{a.k_row(slot), a.v_row(slot), a.sketch_row(slot), a.scores_row(slot),
                  a.pos[slot]};
}

KvSeqView KvStore::seq_view(KvSeqId seq, int32_t stream) const {
  SIEVE_ASSERT(stream >= 0 && stream < geo_.n_stream);
  const StreamTable& st = get(seq).streams[stream];
  return KvSeqView{&pool_.arenas(), st.pages, st.n_tokens};
}

void KvStore::fill_csr(int32_t stream, std::span<const KvSeqId> seqs, KvCsr& out) const {
  SIEVE_ASSERT(stream >= 0 && stream < geo_.n_stream);
  out.indptr.clear();
  out.indices.clear();
  out.last_page_len.clear();
  out.n_tokens.clear();
  out.indptr.push_back(0);
  for (KvSeqId id : seqs) {
    const StreamTable& st = get(id).streams[stream];
    out.indices.insert(out.indices.end(), st.pages.begin(), st.pages.end());
    out.indptr.push_back(static_cast<int32_t>(out.indices.size()));
    const int32_t n_pages = static_cast<int32_t>(st.pages.size());
    out.last_page_len.push_back(st.n_tokens == 0 ? 0
                                                 : st.n_tokens - (n_pages - 1) * geo_.page_size);
    out.n_tokens.push_back(st.n_tokens);
  }
}

void KvStore::copy_token(int64_t dst, int64_t src) {
  const KvArenas& a = pool_.arenas();
  if (geo_.host_rows) {
    std::memcpy(a.k_row(dst), a.k_row(src), a.kv_row_bytes);
    std::memcpy(a.v_row(dst), a.v_row(src), a.kv_row_bytes);
  } else {
    row_copies_.push_back({dst, src});
  }
  if (a.sketch)
    std::memcpy(a.sketch_row(dst), a.sketch_row(src), sizeof(float) * a.n_head * a.sketch_dim);
  if (a.scores) std::memcpy(a.scores_row(dst), a.scores_row(src), sizeof(float) * a.n_token_scores);
  a.pos[dst] = a.pos[src];
}

}  // namespace sieve

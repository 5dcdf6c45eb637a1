#include "kv/kv_page_pool.h"

#include <new>

#include "core/assert.h"

namespace sieve {
namespace {

constexpr std::align_val_t kArenaAlign{64};

}  // namespace

void KvPagePool::AlignedFree::operator()(std::byte* p) const {
  ::operator delete[](p, kArenaAlign);
}

Result<KvPagePool> KvPagePool::create(const KvGeometry& g) {
  KvPagePool pool;
  const int64_t n_slots = int64_t{g.n_pages} * g.page_size;
  // Arena memory is left uninitialised: the OS commits it as pages are first written, and
  // every slot is written (K/V by the model, position and scores by the store) before use.
  auto alloc = [&pool](int64_t bytes) -> std::byte* {
    if (bytes == 0) return nullptr;
    auto* p = static_cast<std::byte*>(
        ::operator new[](static_cast<size_t>(bytes), kArenaAlign, std::nothrow));
    if (p) pool.buffers_.emplace_back(p);
    return p;
  };
  KvArenas& a = pool.arenas_;
  a.dtype = g.dtype;
  a.page_size = g.page_size;
  a.n_head = g.n_head;
  a.head_dim = g.head_dim;
  a.sketch_dim = g.sketch_dim;
  a.n_token_scores = g.n_token_scores;
  a.kv_row_bytes = g.kv_row_bytes;
  // Rows kept by the runner (device memory) have no host arena.
  const int64_t row_slots = g.host_rows ? n_slots : 0;
  a.k = alloc(row_slots * g.kv_row_bytes);
  a.v = alloc(row_slots * g.kv_row_bytes);
  a.sketch = reinterpret_cast<float*>(alloc(row_slots * g.n_head * g.sketch_dim * 4));
  a.scores = reinterpret_cast<float*>(alloc(n_slots * g.n_token_scores * 4));
  a.pos = reinterpret_cast<int32_t*>(alloc(n_slots * 4));
  const bool ok = (!g.host_rows || (a.k && a.v && (g.sketch_dim == 0 || a.sketch))) && a.pos &&
                  (g.n_token_scores == 0 || a.scores);
  if (!ok)
    return make_error("kv pool: cannot allocate {} pages ({} bytes); lower the KV budget",
                      g.n_pages, int64_t{g.n_pages} * g.page_bytes);

  pool.meta_.resize(g.n_pages);
  pool.free_.reserve(g.n_pages);
  for (int32_t p = g.n_pages - 1; p >= 0; --p) pool.free_.push_back(p);
  pool.by_hash_.reserve(static_cast<size_t>(g.n_pages));
  return pool;
}

void KvPagePool::lru_push_back(int32_t page) {
  PageMeta& m = meta_[page];
  m.lru_prev = lru_tail_;
  m.lru_next = -1;
  if (lru_tail_ >= 0)
    meta_[lru_tail_].lru_next = page;
  else
    lru_head_ = page;
  lru_tail_ = page;
  ++n_cached_;
}

void KvPagePool::lru_unlink(int32_t page) {
  PageMeta& m = meta_[page];
  if (m.lru_prev >= 0)
    meta_[m.lru_prev].lru_next = m.lru_next;
  else
    lru_head_ = m.lru_next;
  if (m.lru_next >= 0)
    meta_[m.lru_next].lru_prev = m.lru_prev;
  else
    lru_tail_ = m.lru_prev;
  m.lru_prev = m.lru_next = -1;
  --n_cached_;
}

int32_t KvPagePool::allocate(int32_t stream) {
  int32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    SIEVE_ASSERT(lru_head_ >= 0);  // callers check n_available() first (plan-then-apply)
    page = lru_head_;
    lru_unlink(page);
    PageMeta& m = meta_[page];
    by_hash_.erase(Key{m.stream, m.hash});
    m.has_hash = false;
  }
  PageMeta& m = meta_[page];
  SIEVE_ASSERT(m.refcount == 0 && !m.has_hash);
  m.refcount = 1;
  m.stream = stream;
  m.state = KvPageState::used;
  return page;
}

void KvPagePool::retain(int32_t page) {
  PageMeta& m = meta_[page];
  SIEVE_ASSERT(m.state != KvPageState::free);
  if (m.state == KvPageState::cached) {
    lru_unlink(page);
    m.state = KvPageState::used;
  }
  ++m.refcount;
}

void KvPagePool::release(int32_t page) {
  PageMeta& m = meta_[page];
  SIEVE_ASSERT(m.state == KvPageState::used && m.refcount > 0);
  if (--m.refcount > 0) return;
  if (m.has_hash) {
    m.state = KvPageState::cached;
    lru_push_back(page);
  } else {
    m.state = KvPageState::free;
    free_.push_back(page);
  }
}

int32_t KvPagePool::lookup(int32_t stream, const KvDigest& digest) const {
  auto it = by_hash_.find(Key{stream, digest});
  return it == by_hash_.end() ? -1 : it->second;
}

bool KvPagePool::register_hash(int32_t page, const KvDigest& digest) {
  PageMeta& m = meta_[page];
  SIEVE_ASSERT(m.state == KvPageState::used);
  if (m.has_hash) return false;
  if (!by_hash_.emplace(Key{m.stream, digest}, page).second) return false;
  m.has_hash = true;
  m.hash = digest;
  return true;
}

void KvPagePool::forget_hash(int32_t page) {
  PageMeta& m = meta_[page];
  SIEVE_ASSERT(m.state == KvPageState::used);
  if (!m.has_hash) return;
  by_hash_.erase(Key{m.stream, m.hash});
  m.has_hash = false;
}

std::vector<int32_t> KvPagePool::lru_order() const {
  std::vector<int32_t> order;
  order.reserve(n_cached_);
  for (int32_t p = lru_head_; p >= 0; p = meta_[p].lru_next) order.push_back(p);
  return order;
}

Status KvPagePool::check() const {
  const int32_t n = n_pages();
  std::vector<uint8_t> on_free(n, 0);
  for (int32_t p : free_) {
    if (p < 0 || p >= n) return make_error("kv pool: free list holds page id {}", p);
    if (on_free[p]++) return make_error("kv pool: page {} twice on the free list", p);
  }
  int32_t n_lru = 0;
  int32_t prev = -1;
  for (int32_t p = lru_head_; p >= 0; p = meta_[p].lru_next) {
    if (++n_lru > n) return make_error("kv pool: LRU list has a cycle");
    if (meta_[p].lru_prev != prev) return make_error("kv pool: LRU back link of page {}", p);
    if (meta_[p].state != KvPageState::cached)
      return make_error("kv pool: page {} on the LRU list is not cached", p);
    prev = p;
  }
  if (prev != lru_tail_)
    return make_error("kv pool: LRU tail is {}, walk ends at {}", lru_tail_, prev);
  if (n_lru != n_cached_)
    return make_error("kv pool: {} cached pages counted, {} on the LRU", n_cached_, n_lru);

  int32_t n_free = 0, n_cached = 0, n_used = 0, n_hashed = 0;
  for (int32_t p = 0; p < n; ++p) {
    const PageMeta& m = meta_[p];
    if (m.has_hash) {
      ++n_hashed;
      auto it = by_hash_.find(Key{m.stream, m.hash});
      if (it == by_hash_.end() || it->second != p)
        return make_error("kv pool: hashed page {} is not what the map holds for its key", p);
    }
    switch (m.state) {
      case KvPageState::free:
        ++n_free;
        if (m.refcount != 0 || m.has_hash || !on_free[p])
          return make_error("kv pool: free page {} has refcount {}, hash {}, on free list {}", p,
                            m.refcount, m.has_hash, on_free[p] != 0);
        break;
      case KvPageState::cached:
        ++n_cached;
        if (m.refcount != 0 || !m.has_hash || on_free[p])
          return make_error("kv pool: cached page {} has refcount {}, hash {}", p, m.refcount,
                            m.has_hash);
        break;
      case KvPageState::used:
        ++n_used;
        if (m.refcount <= 0 || on_free[p])
          return make_error("kv pool: used page {} has refcount {}", p, m.refcount);
        break;
    }
  }
  if (n_free != this->n_free() || n_cached != n_cached_ || n_free + n_cached + n_used != n)
    return make_error("kv pool: free {} + cached {} + used {} != total {}", n_free, n_cached,
                      n_used, n);
  if (n_hashed != static_cast<int32_t>(by_hash_.size()))
    return make_error("kv pool: {} hashed pages but {} map entries", n_hashed, by_hash_.size());
  return {};
}

}  // namespace sieve

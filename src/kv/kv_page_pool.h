// The pool of fixed-size physical pages: arenas, reference counts, the free list, the LRU
// list of cached pages and the prefix-cache map (stream, chain hash) -> page.
//
// Every page is in exactly one state:
//   free    refcount 0, no hash, on the free list
//   cached  refcount 0, hash registered, on the LRU list (reusable content, reclaimable)
//   used    refcount >= 1 (referenced by that many page tables), hash optional
// n_free + n_cached + n_used == n_pages always. Only this class changes a refcount, and
// release() is the one place a page leaves "used" (one owner frees pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "kv/kv_config.h"
#include "kv/kv_hash.h"
#include "kv/kv_view.h"

namespace sieve {

enum class KvPageState : uint8_t { free, cached, used };

class KvPagePool {
 public:
  static Result<KvPagePool> create(const KvGeometry& g);

  KvPagePool(KvPagePool&&) noexcept = default;
  KvPagePool& operator=(KvPagePool&&) noexcept = default;
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  int32_t n_pages() const { return static_cast<int32_t>(meta_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_cached() const { return n_cached_; }
  int32_t n_used() const { return n_pages() - n_free() - n_cached(); }
  // Pages allocate() can hand out now: free ones plus reclaimable cached ones.
  int32_t n_available() const { return n_free() + n_cached(); }

  const KvArenas& arenas() const { return arenas_; }

  // Takes a page for `stream` with refcount 1 and no hash. Free pages go first (a fresh pool
  // hands out 0, 1, 2, ...; later the most recently freed page, which is warm in cache);
  // with none free, the least recently cached page is reclaimed and its hash forgotten.
  // Precondition (asserted): n_available() > 0 - callers plan first.
  int32_t allocate(int32_t stream);
  // refcount++; a cached page leaves the LRU list and becomes used again.
  void retain(int32_t page);
  // refcount--; at 0 the page becomes cached (hash known: appended as most recent) or free.
  void release(int32_t page);

  KvPageState state(int32_t page) const { return meta_[page].state; }
  int32_t refcount(int32_t page) const { return meta_[page].refcount; }
  // The stream whose data the page holds (meaningful unless free).
  int32_t stream_of(int32_t page) const { return meta_[page].stream; }

  // Prefix cache. lookup returns -1 when (stream, digest) is unknown.
  int32_t lookup(int32_t stream, const KvDigest& digest) const;
  // Registers a used page's content under digest; false (nothing changes) when the page
  // already has a hash or another page holds (stream, digest).
  bool register_hash(int32_t page, const KvDigest& digest);
  // Forgets a used page's hash (its content is about to change).
  void forget_hash(int32_t page);
  bool has_hash(int32_t page) const { return meta_[page].has_hash; }
  const KvDigest& hash(int32_t page) const { return meta_[page].hash; }

  // Cached pages from least to most recently cached (the order allocate() reclaims them).
  std::vector<int32_t> lru_order() const;
  // Pool-internal invariants: states, counts, lists and map agree. O(n_pages).
  Status check() const;

 private:
  struct PageMeta {
    int32_t refcount = 0;
    int32_t stream = -1;
    int32_t lru_prev = -1;  // cached pages only
    int32_t lru_next = -1;
    KvPageState state = KvPageState::free;
    bool has_hash = false;
    KvDigest hash;
  };
  struct Key {
    int32_t stream;
    KvDigest digest;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return static_cast<size_t>(k.digest.prefix64() ^
                                 (uint64_t(uint32_t(k.stream)) * 0x9e3779b97f4a7c15ull));
    }
  };
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  using Buffer = std::unique_ptr<std::byte[], AlignedFree>;

  KvPagePool() = default;
  void lru_push_back(int32_t page);
  void lru_unlink(int32_t page);

  std::vector<Buffer> buffers_;  // owners of the arenas' memory
  KvArenas arenas_;
  std::vector<PageMeta> meta_;  // [n_pages]
  std::vector<int32_t> free_;   // stack; back() is handed out next
  int32_t lru_head_ = -1;       // least recently cached
  int32_t lru_tail_ = -1;       // most recently cached
  int32_t n_cached_ = 0;
  std::unordered_map<Key, int32_t, KeyHash> by_hash_;
};

}  // namespace sieve

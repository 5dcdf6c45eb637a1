// The paged KV store: sequences, their page tables per stream, appends planned and applied
// atomically, prefix sharing by chain hash, token eviction with compaction, and the
// invariant check. Single-threaded: the engine thread owns it; kernels read through views.
//
// Vocabulary (docs/dev/kv.md):
//   stream   one (layer, KV-head group); has its own page table, length and capacity
//   index    logical token index 0..n_tokens-1 of a sequence in a stream (order preserved)
//   position the token's ORIGINAL position in the sequence (stored per token; survives
//            eviction and window drops, so index != position once tokens are gone)
//   slot     physical row: page * page_size + offset
//
// One step of the engine:
//   room = reserve(step)          // all or nothing; !room->fits() -> preempt and retry
//   write K/V (+ sketch) of the new tokens via row() or the slots of seq_view()
//   publish(seq)                  // full, untouched pages become matchable prefix pages
// and between steps evict()/truncate() as policies decide, free_sequence() when done.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"
#include "kv/kv_config.h"
#include "kv/kv_hash.h"
#include "kv/kv_page_pool.h"
#include "kv/kv_view.h"

namespace sieve {

// Store-assigned, never reused (a stale id is reported, never silently aliased).
using KvSeqId = uint64_t;

// One sequence's part of a step: these tokens are appended to EVERY stream of the sequence
// at positions n_tokens(seq), n_tokens(seq) + 1, ... (a stream that keeps fewer, e.g. after
// a UniPrefill drop, evicts the reserved tokens it does not keep before writing).
struct KvAppend {
  KvSeqId seq = 0;
  std::span<const int32_t> tokens;  // [n_new] token ids (hashed for prefix sharing)
};

// Outcome of an operation that may need pages. "No room" is a value, not an error: the
// operation changed nothing and the scheduler decides (wait, preempt, evict).
struct KvRoom {
  int64_t n_pages_needed = 0;
  int64_t n_pages_available = 0;  // free + cached pages (+ pages the operation itself frees)
  bool fits() const { return n_pages_needed <= n_pages_available; }
  int64_t n_pages_missing() const { return fits() ? 0 : n_pages_needed - n_pages_available; }
};

struct KvSeqAdd {
  KvSeqId seq = 0;
  int32_t n_cached = 0;  // prompt tokens found in the prefix cache (a multiple of page_size)
};

// Writable destination of one token's rows (the store's only writable path into K/V).
struct KvRowRef {
  std::byte* k = nullptr;   // [n_head, head_dim] dtype
  std::byte* v = nullptr;   // [n_head, head_dim] dtype
  float* sketch = nullptr;  // [n_head, sketch_dim] or nullptr
  float* scores = nullptr;  // [n_token_scores] or nullptr
  int32_t position = 0;
  float* k_f32() const { return reinterpret_cast<float*>(k); }
  float* v_f32() const { return reinterpret_cast<float*>(v); }
  uint16_t* k_f16() const { return reinterpret_cast<uint16_t*>(k); }
  uint16_t* v_f16() const { return reinterpret_cast<uint16_t*>(v); }
};

struct KvStats {
  int32_t n_pages_total = 0;
  int32_t n_pages_free = 0;
  int32_t n_pages_cached = 0;
  int32_t n_pages_used = 0;
  int64_t page_bytes = 0;
  int64_t token_bytes = 0;  // one token in one stream: K + V + side data + position
  int32_t n_stream_full = 0;
  int32_t n_stream_window = 0;
  int64_t bytes_per_token_full = 0;      // what one more token of context costs (all full streams)
  int64_t max_bytes_per_seq_window = 0;  // bound on what a sequence's window streams hold
                                         // between steps (pristine streams; sinks + window)
  int32_t n_sequences = 0;
  int64_t n_prefix_queries = 0;       // add_sequence calls
  int64_t n_prefix_query_tokens = 0;  // prompt tokens offered for matching
  int64_t n_prefix_hit_tokens = 0;    // prompt tokens served from the prefix cache
};

class KvView;

class KvStore {
 public:
  static Result<KvStore> create(const KvConfig& config);

  KvStore(KvStore&&) noexcept = default;
  KvStore& operator=(KvStore&&) noexcept = default;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  const KvGeometry& geometry() const { return geo_; }
  const KvArenas& arenas() const { return pool_.arenas(); }
  const KvPagePool& pool() const { return pool_; }
  // What the sparse pipeline and attention get: reads only, no allocator.
  KvView view() const;

  // ---- sequences ----
  // New sequence whose prompt is `prompt`. The longest run of full prompt pages found in the
  // prefix cache for EVERY stream (window streams need only their sink and window pages) is
  // shared (refcount++), at most (prompt.size() - 1) / page_size pages so that one token is
  // left to compute. Those tokens count as appended; the caller reserves the rest:
  // prompt[n_cached..]. `salt` namespaces the cache (e.g. per tenant or adapter).
  Result<KvSeqAdd> add_sequence(std::span<const int32_t> prompt, std::string_view salt = {});
  // Tokens add_sequence would find cached right now (changes nothing; for admission).
  int32_t peek_prefix(std::span<const int32_t> prompt, std::string_view salt = {}) const;
  // Releases every page of the sequence. Pages are released deepest page index first across
  // all streams, so the LRU list reclaims a prompt's tail before its head.
  Status free_sequence(KvSeqId seq);
  bool has_sequence(KvSeqId seq) const { return seqs_.count(seq) != 0; }
  int32_t n_sequences() const { return static_cast<int32_t>(seqs_.size()); }
  // Tokens appended so far (= the next position). Asserts the id exists.
  int32_t n_tokens(KvSeqId seq) const;
  std::span<const int32_t> tokens(KvSeqId seq) const;  // [n_tokens(seq)]
  // Tokens held by the sequence in a stream (<= n_tokens(seq) after drops and evictions).
  int32_t stream_len(KvSeqId seq, int32_t stream) const;

  // ---- steps (plan-then-apply) ----
  // Pages the step needs vs pages it could get, changing nothing. Window streams first drop
  // the pages no query from position n_tokens(seq) on can see; the pages that drop to
  // refcount 0 count as available. Errors: unknown or repeated sequence, too long.
  Result<KvRoom> plan(std::span<const KvAppend> step) const;
  // plan(), then, only if it fits, apply: drop window pages, allocate, extend every stream
  // (positions written, scores zeroed). If it does not fit, NOTHING changes.
  Result<KvRoom> reserve(std::span<const KvAppend> step);
  // Registers the sequence's full pages that hold untouched tokens (no eviction, original
  // positions) in the prefix cache. Call once the K/V of every reserved token is written.
  Status publish(KvSeqId seq);

  // ---- writing ----
  // Rows of token `index` of the sequence in `stream`, for the model to write K/V (+ sketch).
  // Asserts the page is not shared: shared pages hold finished prefix tokens only.
  KvRowRef row(KvSeqId seq, int32_t stream, int32_t index);

  // ---- eviction ----
  // Drops the tokens at `indices` (strictly increasing logical indices) from one stream. The
  // kept tokens keep their order, positions and side data and are compacted towards the
  // front; emptied pages return to the pool. Rewriting a page other sequences share needs a
  // fresh page (copy-on-write): if the pool cannot give them, nothing changes and the
  // returned room does not fit. Evicting untouched pages stops them being published.
  Result<KvRoom> evict(KvSeqId seq, int32_t stream, std::span<const int32_t> indices);
  // Keeps the first n_keep tokens of a stream (evict of the tail; e.g. UniPrefill layers
  // after a drop, or rewinding a rejected step).
  Result<KvRoom> truncate(KvSeqId seq, int32_t stream, int32_t n_keep);

  // Row copies (dst slot, src slot), in the order they must be applied, that evictions made
  // since the last call when the rows live with the runner (KvConfig::host_rows false).
  // The runner applies them before it reads or writes rows again.
  std::vector<std::pair<int64_t, int64_t>> take_row_copies() {
    return std::exchange(row_copies_, {});
  }

  // ---- reading ----
  KvSeqView seq_view(KvSeqId seq, int32_t stream) const;
  // Page tables of `seqs` in one stream as CSR (out is cleared, capacity kept).
  void fill_csr(int32_t stream, std::span<const KvSeqId> seqs, KvCsr& out) const;

  // ---- accounting ----
  KvStats stats() const;
  // KV bytes the sequence references (shared pages counted in full) / holds alone.
  int64_t seq_bytes(KvSeqId seq) const;
  int64_t seq_exclusive_bytes(KvSeqId seq) const;
  // free + cached + used == total, page states, LRU and map consistent, refcounts equal to
  // the references from page tables, table density, positions increasing, shared pages full,
  // hashed pages aligned with their chain hash. O(pages + tokens): tests call it after every
  // operation.
  Status check_invariants() const;

 private:
  // One sequence in one stream. Invariants: pages.empty() == (n_tokens == 0) and
  // (pages.size() - 1) * page_size < n_tokens <= pages.size() * page_size; positions strictly
  // increase along the logical index.
  struct StreamTable {
    std::vector<int32_t> pages;  // [n_pages] physical page ids, logical order
    int32_t n_tokens = 0;
    // Every token held with position < pristine_pos has the K/V of the plain token prefix
    // and sits at the slot aligned with its position (page j of positions is a whole page).
    // Appends extend it only while it covers the whole sequence; evictions lower it for good.
    int32_t pristine_pos = 0;
    // Tokens with position < published_pos were offered to the prefix cache already.
    int32_t published_pos = 0;
  };
  struct Sequence {
    std::vector<int32_t> tokens;        // [n_tokens]
    std::vector<KvDigest> page_hashes;  // [<= n_tokens / page_size] chain hash of token page j
    KvDigest salt;
    std::vector<StreamTable> streams;  // [n_stream]
  };
  struct PrefixMatch {
    int32_t n_pages = 0;
    std::vector<KvDigest> hashes;  // [>= n_pages]
    KvDigest salt;
  };
  struct Drop {  // window pages [begin, end) of one stream that a step releases
    int32_t begin = 0;
    int32_t end = 0;
  };

  KvStore(KvGeometry geo, KvPagePool pool);

  Sequence& get(KvSeqId seq);
  const Sequence& get(KvSeqId seq) const;
  int32_t first_pos(int32_t page) const {
    return pool_.arenas().pos[int64_t{page} * geo_.page_size];
  }
  int32_t last_full_pos(int32_t page) const {
    return pool_.arenas().pos[int64_t{page} * geo_.page_size + geo_.page_size - 1];
  }
  Drop window_drop(const StreamTable& st, const KvCapacity& cap, int32_t next_pos) const;
  // Window pages of a matched prefix of n_pages pages: page j kept iff it holds a sink or a
  // position a query at n_pages * page_size can see.
  bool window_keeps(const KvCapacity& cap, int32_t n_pages, int32_t j) const;
  PrefixMatch match_prefix(std::span<const int32_t> prompt, std::string_view salt) const;
  Result<KvRoom> plan_step(std::span<const KvAppend> step, std::vector<Drop>* drops) const;
  void copy_token(int64_t dst_slot, int64_t src_slot);

  KvGeometry geo_;
  KvPagePool pool_;
  std::unordered_map<KvSeqId, Sequence> seqs_;
  KvSeqId next_id_ = 1;
  int64_t n_prefix_queries_ = 0;
  int64_t n_prefix_query_tokens_ = 0;
  int64_t n_prefix_hit_tokens_ = 0;
  std::vector<std::pair<int64_t, int64_t>> row_copies_;  // host_rows false: copies for the runner
};

// Read-only access for the sparse pipeline and attention: geometry, per-sequence views and
// CSR page tables. It cannot allocate, free, evict or reserve.
class KvView {
 public:
  explicit KvView(const KvStore& store) : store_(&store) {}
  const KvGeometry& geometry() const { return store_->geometry(); }
  const KvArenas& arenas() const { return store_->arenas(); }
  const KvCapacity& capacity(int32_t stream) const { return store_->geometry().capacity[stream]; }
  int32_t n_tokens(KvSeqId seq) const { return store_->n_tokens(seq); }
  KvSeqView seq(KvSeqId seq, int32_t stream) const { return store_->seq_view(seq, stream); }
  void fill_csr(int32_t stream, std::span<const KvSeqId> seqs, KvCsr& out) const {
    store_->fill_csr(stream, seqs, out);
  }

 private:
  const KvStore* store_;
};

inline KvView KvStore::view() const {
  return KvView(*this);
}

}  // namespace sieve

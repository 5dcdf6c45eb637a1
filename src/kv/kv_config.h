// Configuration of the paged KV store: the geometry of one token row, the capacity of each
// stream (full or sliding window), per-token side data, and the memory budget the page pool
// is sized from. One explicit struct, validated once into KvGeometry (docs/dev/kv.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace sieve {

// Element type of the K and V rows. The store never interprets K/V values (it only hands out
// row pointers and copies whole rows during compaction), so any 2- or 4-byte type works.
enum class KvDtype : uint8_t { f32, f16 };

int32_t kv_dtype_size(KvDtype dtype);
const char* kv_dtype_name(KvDtype dtype);

enum class KvCapacityKind : uint8_t {
  full,    // keeps every token appended (unless evicted explicitly)
  window,  // keeps the sink tokens plus the tokens that a future query's window can still see
};

// What a stream must keep. A window stream keeps every token with position < n_sink and,
// for the next query position p, every token with position >= p - window; whole pages that
// hold neither are returned to the pool. That keeps keys in [p - window, p], a superset of
// both common window conventions ((p - window, p] and [p - window, p]).
struct KvCapacity {
  KvCapacityKind kind = KvCapacityKind::full;
  int32_t n_sink = 0;  // window only
  int32_t window = 0;  // window only, > 0

  static KvCapacity full() { return {}; }
  static KvCapacity sliding(int32_t window, int32_t n_sink = 0) {
    return {KvCapacityKind::window, n_sink, window};
  }
  bool is_window() const { return kind == KvCapacityKind::window; }
};

struct KvConfig {
  int32_t n_layer = 0;
  int32_t n_kv_head = 0;  // KV heads per layer
  int32_t head_dim = 0;
  // The KV heads of a layer are split into n_head_group groups of n_kv_head / n_head_group
  // consecutive heads. Each (layer, group) is a STREAM: it has its own page tables, length,
  // capacity and evictions (RTPurbo: retrieval groups full, local groups window-only).
  // 1 = one stream per layer (the usual case). stream = layer * n_head_group + group.
  int32_t n_head_group = 1;
  int32_t page_size = 16;  // tokens per physical page
  KvDtype dtype = KvDtype::f32;
  // Per-token side data stored with the pages and moved with their token (always f32).
  int32_t sketch_dim = 0;      // d_s floats per KV head (sketch keys)
  int32_t n_token_scores = 0;  // floats per token (importance scores; zeroed on append)
  // Capacity per stream: empty = all full; n_layer entries = one per layer (applies to every
  // group of the layer); n_layer * n_head_group entries = one per stream.
  std::vector<KvCapacity> capacity;
  int64_t budget_bytes = 0;  // pool size: floor(budget_bytes / page_bytes) pages
  // Mixed into every prefix-cache hash: must name the model and anything else that changes
  // the K/V computed for a token prefix (weights, RoPE scaling, prefill policy).
  std::string hash_salt;
  bool prefix_cache = true;  // false: add_sequence matches nothing and publish registers nothing
  // false: the K/V and sketch rows live with the runner (device memory); the store keeps the
  // page tables, positions and scores, and hands the row copies of compaction and
  // copy-on-write to the runner (KvStore::take_row_copies).
  bool host_rows = true;
};

// The validated, derived form of a KvConfig.
struct KvGeometry {
  int32_t n_layer = 0;
  int32_t n_head_group = 1;
  int32_t n_stream = 0;  // n_layer * n_head_group
  int32_t n_head = 0;    // KV heads per stream
  int32_t head_dim = 0;
  int32_t page_size = 0;
  KvDtype dtype = KvDtype::f32;
  int32_t sketch_dim = 0;
  int32_t n_token_scores = 0;
  int64_t kv_row_bytes = 0;  // K (or V) row of one token in one stream: n_head * head_dim
  int64_t token_bytes = 0;   // K + V + sketch + scores + position of one token, one stream
  int64_t page_bytes = 0;    // page_size * token_bytes
  int32_t n_pages = 0;
  std::vector<KvCapacity> capacity;  // [n_stream]
  std::string hash_salt;
  bool prefix_cache = true;
  bool host_rows = true;

  int32_t stream(int32_t layer, int32_t group) const { return layer * n_head_group + group; }
  int32_t layer_of(int32_t stream) const { return stream / n_head_group; }
  int32_t group_of(int32_t stream) const { return stream % n_head_group; }
};

// Checks every field and derives the pool size. Errors name the field and a hint.
Result<KvGeometry> make_kv_geometry(const KvConfig& config);

// One line for the start-up log: pages, page bytes, streams per kind.
std::string describe(const KvGeometry& g);

}  // namespace sieve

// What a sparse policy did for one request: the per-request statistics of issue 6 (mean
// selected tokens, fraction of the KV read, selection-cache hit rate, bytes read, tokens
// evicted, KV bytes held). Counted per (layer, step) of full-attention layers.
#pragma once

#include <chrono>
#include <cstdint>

namespace sieve {

struct SparseStats {
  int64_t layer_steps = 0;      // (layer, query chunk) attention calls counted
  int64_t selected_tokens = 0;  // keys read by those calls, summed
  int64_t context_tokens = 0;   // keys dense attention would have read, summed
  int64_t selections = 0;       // selections computed
  int64_t cache_lookups = 0;    // selection-cache lookups (decode)
  int64_t cache_hits = 0;
  int64_t bytes_read = 0;      // K/V (+ sketch) bytes read by scoring and attention
  int64_t tokens_evicted = 0;  // summed over layers
  int64_t kv_bytes_held = 0;   // at the end of the request
  // UniPrefill: (layer, token) rows the prefill computed vs what dense prefill computes.
  int64_t prefill_rows = 0;
  int64_t prefill_rows_dense = 0;
  int64_t prefill_selections = 0;  // (selection layer, chunk) selections run
  int64_t prefill_dropped = 0;     // prompt tokens dropped, summed over selections
  int64_t select_ns = 0;           // wall time planning sparse attention (scoring, selection)

  double mean_selected() const { return layer_steps ? double(selected_tokens) / layer_steps : 0; }
  double selected_fraction() const {
    return context_tokens ? double(selected_tokens) / context_tokens : 1.0;
  }
  double prefill_row_fraction() const {
    return prefill_rows_dense ? double(prefill_rows) / prefill_rows_dense : 1.0;
  }
  double hit_rate() const { return cache_lookups ? double(cache_hits) / cache_lookups : 0; }
  void add(const SparseStats& o) {
    layer_steps += o.layer_steps;
    selected_tokens += o.selected_tokens;
    context_tokens += o.context_tokens;
    selections += o.selections;
    cache_lookups += o.cache_lookups;
    cache_hits += o.cache_hits;
    bytes_read += o.bytes_read;
    tokens_evicted += o.tokens_evicted;
    prefill_rows += o.prefill_rows;
    prefill_rows_dense += o.prefill_rows_dense;
    prefill_selections += o.prefill_selections;
    prefill_dropped += o.prefill_dropped;
    select_ns += o.select_ns;
  }
};

// Adds the wall time of its scope to a counter (SparseStats::select_ns), on every path out.
struct ScopedNs {
  int64_t& acc;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~ScopedNs() {
    acc +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
  }
};

}  // namespace sieve

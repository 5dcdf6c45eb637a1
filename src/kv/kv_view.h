// Read-only views of the paged KV store: what attention, the sparse pipeline and kernels see.
// They carry raw pointers and page ids only (no allocator, no store): POD-like values that a
// kernel launch can copy. A view is valid until the next mutating call on the store
// (reserve, add/free sequence, evict, truncate); K/V values may be written meanwhile.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/assert.h"
#include "kv/kv_config.h"

namespace sieve {

// Where the pool's data lives. All arenas are indexed by slot = page * page_size + offset,
// NHD layout (token-major, then head, then dim), each arena 64-byte aligned:
//   k, v    [n_pages, page_size, n_head, head_dim]     dtype (f32 or f16)
//   sketch  [n_pages, page_size, n_head, sketch_dim]   f32 (nullptr when sketch_dim == 0)
//   scores  [n_pages, page_size, n_token_scores]       f32 (nullptr when n_token_scores == 0)
//   pos     [n_pages, page_size]                       int32 original position of the token
// A K row of one token ([n_head, head_dim]) is contiguous; head h of page p starts at
// k + ((p * page_size) * n_head + h) * head_dim elements with row stride n_head * head_dim.
struct KvArenas {
  KvDtype dtype = KvDtype::f32;
  int32_t page_size = 0;
  int32_t n_head = 0;  // KV heads per stream
  int32_t head_dim = 0;
  int32_t sketch_dim = 0;
  int32_t n_token_scores = 0;
  int64_t kv_row_bytes = 0;  // n_head * head_dim * dtype size
  std::byte* k = nullptr;
  std::byte* v = nullptr;
  float* sketch = nullptr;
  float* scores = nullptr;
  int32_t* pos = nullptr;

  int64_t slot(int32_t page, int32_t offset) const { return int64_t{page} * page_size + offset; }
  std::byte* k_row(int64_t slot) const { return k + slot * kv_row_bytes; }
  std::byte* v_row(int64_t slot) const { return v + slot * kv_row_bytes; }
  float* sketch_row(int64_t slot) const {  // [n_head, sketch_dim]
    return sketch ? sketch + slot * n_head * sketch_dim : nullptr;
  }
  float* scores_row(int64_t slot) const {  // [n_token_scores]
    return scores ? scores + slot * n_token_scores : nullptr;
  }
};

// The tokens of ONE sequence in ONE stream, addressed by logical index 0..n_tokens-1 in
// their original order. Invariant: every page but the last is full, so token i lives in
// pages[i / page_size] at offset i % page_size (FlashInfer's page-table semantics).
struct KvSeqView {
  const KvArenas* arenas = nullptr;
  std::span<const int32_t> pages;  // [n_pages] physical page ids in logical order
  int32_t n_tokens = 0;

  int32_t page_size() const { return arenas->page_size; }
  int32_t n_pages() const { return static_cast<int32_t>(pages.size()); }
  // Tokens in the last page, 1..page_size (0 only when the view is empty).
  int32_t last_page_len() const {
    return n_tokens == 0 ? 0 : n_tokens - (n_pages() - 1) * page_size();
  }
  int64_t slot(int32_t i) const {
    SIEVE_ASSERT(i >= 0 && i < n_tokens);
    return arenas->slot(pages[i / page_size()], i % page_size());
  }
  // [n_head, head_dim] rows of token i, read in place.
  const float* k(int32_t i) const {
    SIEVE_ASSERT(arenas->dtype == KvDtype::f32);
    return reinterpret_cast<const float*>(arenas->k_row(slot(i)));
  }
  const float* v(int32_t i) const {
    SIEVE_ASSERT(arenas->dtype == KvDtype::f32);
    return reinterpret_cast<const float*>(arenas->v_row(slot(i)));
  }
  const uint16_t* k_f16(int32_t i) const {
    SIEVE_ASSERT(arenas->dtype == KvDtype::f16);
    return reinterpret_cast<const uint16_t*>(arenas->k_row(slot(i)));
  }
  const uint16_t* v_f16(int32_t i) const {
    SIEVE_ASSERT(arenas->dtype == KvDtype::f16);
    return reinterpret_cast<const uint16_t*>(arenas->v_row(slot(i)));
  }
  const std::byte* k_raw(int32_t i) const { return arenas->k_row(slot(i)); }
  const std::byte* v_raw(int32_t i) const { return arenas->v_row(slot(i)); }
  const float* sketch(int32_t i) const { return arenas->sketch_row(slot(i)); }  // [n_head, d_s]
  // Floats from one token's sketch row to the next within a page.
  int64_t sketch_stride() const { return int64_t{arenas->n_head} * arenas->sketch_dim; }
  // Tokens from i to the end of its page, at most end - i: a run whose rows lie a fixed
  // stride apart.
  int32_t page_run(int32_t i, int32_t end) const {
    return std::min(end - i, page_size() - i % page_size());
  }
  // Importance scores are side data that scorers update in place (STCA accumulation), so
  // they are writable through the read-only view; the page tables are not.
  float* scores(int32_t i) const { return arenas->scores_row(slot(i)); }  // [n_token_scores]
  int32_t position(int32_t i) const { return arenas->pos[slot(i)]; }
  // Positions of page k's tokens ([page_size], the first len valid): paged like K and V.
  const int32_t* page_positions(int32_t k) const { return arenas->pos + arenas->slot(pages[k], 0); }
  // Start of head h's rows in page k; successive tokens are n_head * head_dim elements apart.
  const std::byte* k_page_head(int32_t k, int32_t h) const {
    return arenas->k_row(arenas->slot(pages[k], 0)) +
           int64_t{h} * (arenas->kv_row_bytes / arenas->n_head);
  }
  const std::byte* v_page_head(int32_t k, int32_t h) const {
    return arenas->v_row(arenas->slot(pages[k], 0)) +
           int64_t{h} * (arenas->kv_row_bytes / arenas->n_head);
  }
};

// Page tables of a batch of sequences in one stream, in CSR form (FlashInfer's paged-KV
// convention): sequence b owns indices[indptr[b] .. indptr[b + 1]) and its last page holds
// last_page_len[b] tokens (0 for an empty sequence). A selection over the same pool is just
// another index list, so one attention kernel reads both. Reused across steps: fill_csr
// clears and refills it, keeping the capacity (stable addresses once warmed up).
struct KvCsr {
  std::vector<int32_t> indptr;         // [n_seq + 1]
  std::vector<int32_t> indices;        // [indptr[n_seq]] physical page ids
  std::vector<int32_t> last_page_len;  // [n_seq]
  std::vector<int32_t> n_tokens;       // [n_seq] logical lengths (held tokens)
};

}  // namespace sieve

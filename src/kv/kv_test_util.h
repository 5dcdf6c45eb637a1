// Helpers shared by the kv tests: small configurations and a content model that writes
// recognisable rows so tests can tell which token's data sits in which slot.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kv/kv_store.h"

namespace sieve::kv_test {

#define SIEVE_EXPECT_KV_OK(store)                           \
  do {                                                      \
    const ::sieve::Status st_ = (store).check_invariants(); \
    ASSERT_TRUE(st_.ok()) << st_.message();                 \
  } while (0)

// A config with `n_pages` pages exactly (the budget is computed from the page size).
inline KvConfig small_config(int32_t n_layer, int32_t n_pages, int32_t page_size = 4,
                             std::vector<KvCapacity> capacity = {}) {
  KvConfig c;
  c.n_layer = n_layer;
  c.n_kv_head = 2;
  c.head_dim = 4;
  c.page_size = page_size;
  c.capacity = std::move(capacity);
  c.hash_salt = "test-model";
  const KvGeometry g = make_kv_geometry([&] {
                         KvConfig t = c;
                         t.budget_bytes = int64_t{1} << 30;
                         return t;
                       }())
                           .value();
  c.budget_bytes = g.page_bytes * n_pages;
  return c;
}

inline KvStore make_store(const KvConfig& c) {
  Result<KvStore> r = KvStore::create(c);
  SIEVE_ASSERT(r.ok());
  return std::move(r).value();
}

inline std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = start + i;
  return t;
}

// Prefix fingerprint of token ids: differs when any earlier token differs, like real K/V.
inline uint32_t fingerprint(std::span<const int32_t> tokens, int32_t pos) {
  uint32_t h = 2166136261u;
  for (int32_t i = 0; i <= pos; ++i) h = (h ^ static_cast<uint32_t>(tokens[i])) * 16777619u;
  return h & 0xffffffu;  // exact in a float
}

// The f32 K row written for the token at `pos` of a sequence in `stream`; `tag` marks rows
// computed after an eviction (never valid prefix content). Row size n_head * head_dim >= 5.
inline float k_value(int32_t e, int32_t stream, int32_t pos, std::span<const int32_t> tokens,
                     int32_t tag) {
  switch (e) {
    case 0:
      return static_cast<float>(pos);
    case 1:
      return static_cast<float>(tokens[pos]);
    case 2:
      return static_cast<float>(stream);
    case 3:
      return static_cast<float>(fingerprint(tokens, pos));
    case 4:
      return static_cast<float>(tag);
    default:
      return static_cast<float>(e);
  }
}

// Writes the rows of the last n_new tokens of every stream (the ones reserve just added).
inline void write_new_rows(KvStore& kv, KvSeqId seq, int32_t n_new, int32_t tag = 0) {
  const KvGeometry& g = kv.geometry();
  const int32_t row = g.n_head * g.head_dim;
  const std::span<const int32_t> toks = kv.tokens(seq);
  for (int32_t s = 0; s < g.n_stream; ++s) {
    const int32_t len = kv.stream_len(seq, s);
    for (int32_t i = len - n_new; i < len; ++i) {
      KvRowRef r = kv.row(seq, s, i);
      for (int32_t e = 0; e < row; ++e) {
        r.k_f32()[e] = k_value(e, s, r.position, toks, tag);
        r.v_f32()[e] = -k_value(e, s, r.position, toks, tag);
      }
      for (int32_t e = 0; e < g.n_head * g.sketch_dim; ++e)
        r.sketch[e] = static_cast<float>(r.position) + 0.25f * e;
      for (int32_t e = 0; e < g.n_token_scores; ++e) r.scores[e] = 0.5f * r.position + e;
    }
  }
}

// Reserve `tokens` for one sequence, write its rows, publish. Returns false on no room.
inline bool append(KvStore& kv, KvSeqId seq, std::span<const int32_t> tokens, bool publish = true) {
  const KvAppend item{seq, tokens};
  Result<KvRoom> room = kv.reserve({&item, 1});
  SIEVE_ASSERT(room.ok());
  if (!room->fits()) return false;
  write_new_rows(kv, seq, static_cast<int32_t>(tokens.size()));
  if (publish) SIEVE_ASSERT(kv.publish(seq).ok());
  return true;
}

// Positions held by a sequence in a stream, in logical order.
inline std::vector<int32_t> positions(const KvStore& kv, KvSeqId seq, int32_t stream) {
  const KvSeqView v = kv.seq_view(seq, stream);
  std::vector<int32_t> p;
  for (int32_t i = 0; i < v.n_tokens; ++i) p.push_back(v.position(i));
  return p;
}

inline std::vector<int32_t> pages(const KvStore& kv, KvSeqId seq, int32_t stream) {
  const KvSeqView v = kv.seq_view(seq, stream);
  return {v.pages.begin(), v.pages.end()};
}

// True when every held row of the stream is the row written for its position (tag 0).
inline bool rows_match(const KvStore& kv, KvSeqId seq, int32_t stream, int32_t tag = 0) {
  const KvGeometry& g = kv.geometry();
  const KvSeqView v = kv.seq_view(seq, stream);
  const std::span<const int32_t> toks = kv.tokens(seq);
  for (int32_t i = 0; i < v.n_tokens; ++i)
    for (int32_t e = 0; e < g.n_head * g.head_dim; ++e) {
      const float want = k_value(e, stream, v.position(i), toks, tag);
      if (v.k(i)[e] != want || v.v(i)[e] != -want) return false;
    }
  return true;
}

}  // namespace sieve::kv_test

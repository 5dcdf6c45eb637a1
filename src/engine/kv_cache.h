// The KV storage the forward pass writes and attention reads, per sequence.
// ContiguousKv keeps every layer's rows in one growing f16 buffer (the reference layout);
// the paged store (src/kv) implements the same interface with pages, windows and sharing.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/attention.h"
#include "core/result.h"
#include "model/hparams.h"

namespace sieve {

class SequenceKv_i {
 public:
  virtual ~SequenceKv_i() = default;
  // Tokens already stored (the next token's index).
  virtual int32_t n_tokens() const = 0;
  // Makes room for n_new more tokens in every layer; fails without side effects.
  virtual Status reserve(int32_t n_new) = 0;
  // Destination of token `index`'s K and V rows in `layer`: [n_head_kv, head_dim] f16 each.
  virtual uint16_t* k_row(int layer, int32_t index) = 0;
  virtual uint16_t* v_row(int layer, int32_t index) = 0;
  // Marks tokens [n_tokens(), n_tokens() + n) as written with these positions.
  virtual void commit(const int32_t* positions, int32_t n) = 0;
  // What attention reads for (layer, kv_head): every token stored for that layer so far.
  virtual KvHeadView view(int layer, int kv_head) = 0;
  // Bytes of KV held.
  virtual int64_t bytes() const = 0;
  // Forget tokens from index n on (rewind after a rejected step; n <= n_tokens()).
  virtual void truncate(int32_t n) = 0;
};

class ContiguousKv final : public SequenceKv_i {
 public:
  ContiguousKv(const ModelHParams& hp, int32_t n_ctx);
  int32_t n_tokens() const override { return n_tokens_; }
  Status reserve(int32_t n_new) override;
  uint16_t* k_row(int layer, int32_t index) override;
  uint16_t* v_row(int layer, int32_t index) override;
  void commit(const int32_t* positions, int32_t n) override;
  KvHeadView view(int layer, int kv_head) override;
  int64_t bytes() const override;
  void truncate(int32_t n) override;

 private:
  int32_t n_layer_, row_elems_, head_dim_, n_ctx_;
  int32_t n_tokens_ = 0;
  int32_t capacity_ = 0;
  std::vector<std::vector<uint16_t>> k_, v_;  // [n_layer][capacity, n_head_kv, head_dim]
  std::vector<int32_t> pos_;                  // [capacity]
  // page pointer tables handed out by view(): [n_layer][n_head_kv]
  std::vector<const uint16_t*> kp_, vp_;
};

}  // namespace sieve

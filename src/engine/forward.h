// One forward step over a batch of sequence chunks: each entry contributes a prefill chunk or
// a single decode token of its own sequence. Matmuls run over all tokens of the batch at
// once; attention runs per sequence against that sequence's KV.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/result.h"
#include "core/thread_pool.h"
#include "engine/kv_binding.h"
#include "kv/kv_store.h"
#include "model/model.h"

namespace sieve {

// One sequence's part of a step. The chunk's tokens must already be reserved in the store
// (KvStore::reserve): they are the last tokens.size() tokens of the sequence, and the
// forward writes their K/V rows.
struct BatchEntry {
  KvSeqId seq = 0;
  std::span<const int32_t> tokens;   // the chunk
  bool all_logits = false;           // logits for every token of the chunk, else the last only
};

struct ForwardStats {
  int64_t tokens = 0;
  double ms = 0;
};

class Forward {
 public:
  Forward(const Model& model, ThreadPool& pool, KvStore& kv);

  // Runs the step. logits receives, entry by entry, the rows asked for: all tokens of an
  // entry with all_logits, else its last token ([n_rows, n_vocab] row-major).
  Status run(std::span<const BatchEntry> batch, std::vector<float>& logits);

  const Model& model() const { return model_; }

 private:
  void attention_layer(int layer, std::span<const BatchEntry> batch);

  const Model& model_;
  ThreadPool& pool_;
  KvStore& kv_;
  HeadViewTables views_;
  MatmulScratch mm_;
  // activations, [n_tok, ...]
  std::vector<float> h_, x_, q_, k_, v_, attn_, tmp_, gate_, up_;
  std::vector<int32_t> pos_;
  std::vector<int64_t> entry_offset_;  // first token of each entry in the batch
};

}  // namespace sieve

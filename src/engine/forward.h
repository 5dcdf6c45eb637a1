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
#include "engine/kv_cache.h"
#include "model/model.h"

namespace sieve {

struct BatchEntry {
  SequenceKv_i* kv = nullptr;        // the sequence's KV; new tokens are appended to it
  std::span<const int32_t> tokens;   // the chunk
  const int32_t* positions = nullptr;  // [tokens.size()] or nullptr: n_tokens() + i
  bool all_logits = false;           // logits for every token of the chunk, else the last only
};

struct ForwardStats {
  int64_t tokens = 0;
  double ms = 0;
};

class Forward {
 public:
  Forward(const Model& model, ThreadPool& pool);

  // Runs the step. logits receives, entry by entry, the rows asked for: all tokens of an
  // entry with all_logits, else its last token ([n_rows, n_vocab] row-major).
  Status run(std::span<const BatchEntry> batch, std::vector<float>& logits);

  const Model& model() const { return model_; }

 private:
  void attention_layer(int layer, std::span<const BatchEntry> batch);

  const Model& model_;
  ThreadPool& pool_;
  MatmulScratch mm_;
  // activations, [n_tok, ...]
  std::vector<float> h_, x_, q_, k_, v_, attn_, tmp_, gate_, up_;
  std::vector<int32_t> pos_;
  std::vector<int64_t> entry_offset_;  // first token of each entry in the batch
};

}  // namespace sieve

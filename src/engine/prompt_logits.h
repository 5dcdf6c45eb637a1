// The logits of every prompt position, straight through the CPU runner (Forward) in chunks:
// what golden-model fixtures and the chunking tests compare. Not a generation loop; that is
// the engine's (engine_generate.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace sieve {

// [n_prompt, n_vocab], dense attention, prefilled in chunks of n_batch into a fresh store.
Result<std::vector<float>> prompt_logits(const Model& model, ThreadPool& pool,
                                         std::span<const int32_t> prompt, int32_t n_batch);

}  // namespace sieve

// UniPrefill's token dropping (docs/sparse.md "Prefill token dropping"): at a selection layer
// the last prompt tokens rate every token by the attention they pay it; blocks of G tokens
// are kept by mass and the rest skip every later layer. This file holds the model-free half:
// which layers select, and which rows a selection keeps. Forward computes the importance and
// moves the rows (src/engine/forward_uniprefill.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"
#include "sparse/policy.h"

namespace sieve {

// The layers that select for a model with these layer kinds (true: full attention). The
// policy's up_layers when given (each must be a full-attention layer below n_layer), else
// auto: on a hybrid (some sliding-window layers) every full-attention layer but the first
// layer; otherwise a spaced schedule from round(15/32 n) every round(n/8) layers below the
// last layer (SmolLM2: 14, 18, 22, 26). The public Llama-3.1-8B schedule scaled (7, 11, ..., 27
// of 32, i.e. from 7/32 n) lost 3.3 points on SmolLM2 at 4K where this one lost none
// (bench/RESULTS.md, issue 8): a small model's early layers rate tokens poorly.
Result<std::vector<int32_t>> uniprefill_layers(const PolicyConfig& p,
                                               std::span<const uint8_t> full_layer);

// Rows kept by one selection. importance[i]: the mass candidate row i received (summed over
// queries and heads); pos[i]: its original position (ascending). Rows are grouped into blocks
// of up_block consecutive candidates; a block's score is its mean importance; blocks are
// taken best first while the mass taken before them is <= up_p of the total (so the block
// crossing p is kept, and the best block always is); up_p >= 1 keeps every block. Rows with
// pos < up_sinks and the last up_tail rows are always kept. keep[i] = 1 for kept rows.
void uniprefill_keep(const PolicyConfig& p, std::span<const float> importance,
                     std::span<const int32_t> pos, std::vector<char>& keep);

}  // namespace sieve

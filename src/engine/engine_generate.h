// One request through the engine, synchronously: what `sieve run`, `sieve bench` and local
// eval need (one running sequence) on any backend, over the same scheduler that serves many.
#pragma once

#include <functional>
#include <span>

#include "core/result.h"
#include "engine/engine.h"
#include "engine/generate.h"

namespace sieve {

// Submits the prompt, streams each generated token to on_token (return false to stop: the
// request is cancelled) and waits for the end. Timings: prefill_ms is submit -> first token,
// decode_ms the rest; the sparse statistics and cached tokens are the request's own.
Result<GenerateStats> generate_with_engine(Engine& engine, std::span<const int32_t> prompt,
                                           const GenerateOptions& opt,
                                           const std::function<bool(int32_t)>& on_token);

}  // namespace sieve

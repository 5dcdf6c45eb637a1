// Token sampling: penalties, then temperature, top-k, top-p, min-p, then a seeded draw.
// temperature <= 0 is greedy (argmax; ties -> lowest id).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"

namespace sieve {

struct SamplerParams {
  float temperature = 0.8f;
  int32_t top_k = 40;   // <= 0: off
  float top_p = 0.95f;  // >= 1: off
  float min_p = 0.05f;  // <= 0: off
  float repeat_penalty =
      1.0f;  // 1: off (llama.cpp style: divide positive logits, multiply negative)
  float presence_penalty = 0.0f;   // OpenAI style, subtracted once per seen token
  float frequency_penalty = 0.0f;  // OpenAI style, subtracted per occurrence
  int32_t penalty_last_n = 64;     // how many recent tokens the penalties look at (-1: all)
  uint64_t seed = 0xC0FFEE;
};

// Checks ranges; the error names the parameter and the valid range.
Status validate(const SamplerParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Picks the next token from logits [n_vocab]; `history` is the sequence so far
  // (prompt + generated) for the penalties.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // log-probabilities of the last distribution sampled from (after penalties and temperature
  // 1), for logprobs: top n (id, logprob) pairs.
  const SamplerParams& params() const { return p_; }

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<int32_t> ids_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace sieve

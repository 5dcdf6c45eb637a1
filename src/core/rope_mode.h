#pragma once

namespace sieve {
// Which dims RoPE rotates together: NORM pairs (2i, 2i+1) (llama GGUFs, whose converter
// permutes Q/K rows), NEOX pairs (i, i + n_rot/2) (gemma, HF rotate_half).
enum class RopeMode { norm, neox };
}  // namespace sieve

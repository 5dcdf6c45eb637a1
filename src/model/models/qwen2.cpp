// Architecture "qwen2" (Qwen2 / Qwen2.5, incl. Coder): llama's pre-norm blocks (RMSNorm,
// GQA attention, SwiGLU FFN) with biases on the Q, K and V projections, RoPE in NEOX mode
// (the converter does not permute Q/K rows for qwen2), theta 1e6, tied or untied output,
// and no QK-norm. Context extension is YaRN, from rope.scaling.* or the CLI.
#include "model/model_loader.h"

namespace sieve {

Status load_qwen2(const GgufFile& f, ModelHParams& hp, ModelWeights& w) {
  return load_llama_family(f, LlamaFamily{"qwen2.", RopeMode::neox, 1e-6, 1e6, true}, hp, w);
}

}  // namespace sieve

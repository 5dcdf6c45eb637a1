// A loaded model: the mapped GGUF file, its hyperparameters, weight views and tokenizer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/result.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"
#include "model/tokenizer.h"

namespace sieve {

struct LayerWeights {
  const float* attn_norm = nullptr;       // [n_embd]
  WeightView wq, wk, wv, wo;              // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  const float* bq = nullptr;              // [q_dim] projection biases (qwen2); nullptr: none
  const float* bk = nullptr;              // [kv_dim]
  const float* bv = nullptr;              // [kv_dim]
  const float* q_norm = nullptr;          // [head_dim] (qk_norm)
  const float* k_norm = nullptr;          // [head_dim] (qk_norm)
  const float* post_attn_norm = nullptr;  // [n_embd] (post_norms)
  const float* ffn_norm = nullptr;        // [n_embd]
  WeightView w_gate, w_up, w_down;        // [n_ff, n_embd] x2, [n_embd, n_ff]
  const float* post_ffn_norm = nullptr;   // [n_embd] (post_norms)
};

struct ModelWeights {
  WeightView tok_embd;                 // [n_vocab, n_embd]
  WeightView output;                   // [n_vocab, n_embd] (== tok_embd when tied)
  const float* output_norm = nullptr;  // [n_embd]
  std::vector<LayerWeights> layers;
};

struct Model {
  std::unique_ptr<GgufFile> file;
  ModelHParams hp;
  ModelWeights w;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Opens, validates and binds a GGUF model. Unsupported architectures, tensor types or
// missing/misshapen tensors are errors naming the tensor and what was expected.
Result<std::unique_ptr<Model>> load_model(const std::string& path);

// Sets the model's RoPE scaling (YaRN / linear; type none turns it off) and folds YaRN's
// magnitude into attn_scale. Bad values (factor <= 0, YaRN without an original context)
// are errors naming the field.
Status set_rope_scaling(ModelHParams& hp, const RopeScaling& s);

// Architectures Sieve can run (for error messages and `sieve inspect`).
std::vector<std::string> supported_architectures();

}  // namespace sieve

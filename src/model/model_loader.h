// Helpers the per-architecture loaders (models/*.cpp) share: typed metadata reads with
// clear errors, and tensor binding that checks names, shapes and types.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "core/result.h"
#include "model/model.h"

namespace sieve {

class TensorBinder {
 public:
  explicit TensorBinder(const GgufFile& f) : f_(f) {}
  // A 2-D weight of n_rows x n_cols in any supported type.
  Result<WeightView> matrix(const std::string& name, int64_t n_rows, int64_t n_cols) const;
  // A 1-D f32 vector of n elements.
  Result<const float*> vector(const std::string& name, int64_t n) const;
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

 private:
  const GgufFile& f_;
};

// Binds blk.N.<name> tensors of one layer, failing with the tensor named.
class LayerBinder {
 public:
  LayerBinder(const TensorBinder& b, int layer)
      : b_(b), prefix_("blk." + std::to_string(layer) + ".") {}
  Status matrix(const char* name, int64_t n_rows, int64_t n_cols, WeightView& dst) const;
  Status vector(const char* name, int64_t n, const float*& dst) const;

 private:
  const TensorBinder& b_;
  std::string prefix_;
};

// The vocabulary size ({arch}.vocab_size, else the embedding's rows), then validate_hparams,
// then token_embd / output (tied when absent) / output_norm. Common to every architecture.
Status bind_embeddings_and_validate(const GgufFile& f, const std::string& arch_prefix,
                                    ModelHParams& hp, ModelWeights& w);

// Clamps a metadata count before narrowing; out-of-range values fail validate_hparams.
inline int32_t narrow_count(uint64_t v) {
  return static_cast<int32_t>(std::min<uint64_t>(v, 1u << 30));
}

// Reads {arch}.key as an unsigned integer; error if missing (when required) or not an integer.
Result<uint64_t> meta_uint(const GgufFile& f, const std::string& key);
uint64_t meta_uint_or(const GgufFile& f, const std::string& key, uint64_t fallback);
double meta_float_or(const GgufFile& f, const std::string& key, double fallback);

// Reads {arch}.rope.scaling.* (type none/linear/yarn, factor, original_context_length,
// attn_factor, yarn_ext_factor, yarn_beta_fast/slow; the legacy rope.scale_linear) and
// applies them with set_rope_scaling. longrope and YaRN's log multiplier are errors.
Status read_rope_scaling(const GgufFile& f, const std::string& arch_prefix, ModelHParams& hp);
// The block shape every architecture has: block_count, embedding_length, attention.head_count,
// feed_forward_length and context_length (required; a missing one is an error naming it) and
// attention.head_count_kv (default: head_count).
Status read_block_shape(const GgufFile& f, const std::string& arch_prefix, ModelHParams& hp);

// Checks the common invariants (head counts divide, dims positive, ...) once per model.
Status validate_hparams(const ModelHParams& hp);

// Architecture loaders: fill hp and weights from the file.
// The llama block (pre-norm RMSNorm, GQA attention with RoPE, SwiGLU) as its relatives vary it:
// the metadata prefix, the RoPE pairing, metadata defaults and Q/K/V biases (models/llama.cpp).
struct LlamaFamily {
  const char* prefix;        // "llama.", "qwen2."
  RopeMode rope_mode;        // norm (llama's converter permutes Q/K rows) or neox (qwen2)
  double default_eps;        // attention.layer_norm_rms_epsilon when absent
  double default_rope_base;  // rope.freq_base when absent
  bool qkv_bias;             // attn_{q,k,v}.bias tensors
};
Status load_llama_family(const GgufFile& f, const LlamaFamily& fam, ModelHParams& hp,
                         ModelWeights& w);
Status load_llama(const GgufFile& f, ModelHParams& hp, ModelWeights& w);
Status load_gemma3(const GgufFile& f, ModelHParams& hp, ModelWeights& w);
Status load_qwen2(const GgufFile& f, ModelHParams& hp, ModelWeights& w);

}  // namespace sieve

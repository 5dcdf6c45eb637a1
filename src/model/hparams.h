// Hyperparameters of a decoder-only transformer, read from GGUF metadata by the
// architecture's loader (models/<arch>.cpp). The forward pass reads only this struct, so a
// new architecture is a new loader plus, at most, a new flag here.
#pragma once

#include <algorithm>
#include <cstdint>

#include <string>
#include <vector>
#include "core/rope_mode.h"

namespace sieve {

enum class FfnAct { silu, gelu_tanh };   // SwiGLU (llama) / GeGLU (gemma)
enum class LayerKind { full, sliding };  // attention over all past tokens / a window

struct ModelHParams {
  std::string arch;  // general.architecture
  std::string name;  // general.name
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;  // key/value length per head
  int32_t n_ff = 0;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeMode rope_mode = RopeMode::norm;
  int32_t n_rot = 0;              // rotary dims per head (<= head_dim)
  float attn_scale = 0;           // multiplies q.k (YaRN's mscale^2 included: set_rope_scaling)
  float attn_scale_unscaled = 0;  // the architecture's own q.k scale, before rope scaling
  float embd_scale = 1.0f;        // multiplies token embeddings (gemma: sqrt(n_embd))
  FfnAct act = FfnAct::silu;
  bool qk_norm = false;        // per-head RMSNorm of q and k before RoPE (gemma3)
  bool post_norms = false;     // RMSNorm after attention and after the FFN (gemma "sandwich")
  bool tied_output = true;     // output projection = token embedding matrix
  int32_t sliding_window = 0;  // tokens a sliding layer sees, the current one included
  std::vector<LayerKind> layer_kind;  // [n_layer]
  std::vector<float> rope_base;       // [n_layer] RoPE theta per layer
  RopeScaling rope_scaling;           // YaRN / linear context extension (every layer)

  int32_t n_gqa() const { return n_head / n_head_kv; }
  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // The context the model handles: n_ctx_train, or the original context x factor when RoPE
  // scaling stretches it (Qwen2.5: 32768 x 4 with YaRN).
  int32_t n_ctx_max() const {
    if (!rope_scaling.active() || rope_scaling.factor < 1.0f) return n_ctx_train;
    const double c = static_cast<double>(rope_scaling.n_ctx_orig) * rope_scaling.factor;
    return c > n_ctx_train ? static_cast<int32_t>(std::min(c, 1073741824.0)) : n_ctx_train;
  }
};

}  // namespace sieve

// Architecture "llama" (SmolLM2 and the Llama family): pre-norm blocks, GQA attention with
// RoPE in NORM mode (the GGUF converter permutes Q/K rows so adjacent pairs rotate),
// SwiGLU FFN, RMSNorm without +1, optional tied output.
#include <cmath>

#include "model/model_loader.h"

namespace sieve {

Status load_llama_family(const GgufFile& f, const LlamaFamily& fam, ModelHParams& hp,
                         ModelWeights& w) {
  const std::string a = fam.prefix;
  SIEVE_TRY(read_block_shape(f, a, hp));
  hp.head_dim = hp.n_head > 0 ? hp.n_embd / hp.n_head : 0;
  hp.head_dim = narrow_count(meta_uint_or(f, a + "attention.key_length", hp.head_dim));
  hp.n_rot = narrow_count(meta_uint_or(f, a + "rope.dimension_count", hp.head_dim));
  hp.rms_eps =
      static_cast<float>(meta_float_or(f, a + "attention.layer_norm_rms_epsilon", fam.default_eps));
  const float base =
      static_cast<float>(meta_float_or(f, a + "rope.freq_base", fam.default_rope_base));
  hp.rope_mode = fam.rope_mode;
  hp.act = FfnAct::silu;
  hp.attn_scale = hp.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(hp.head_dim)) : 0;
  hp.layer_kind.assign(hp.n_layer > 0 ? hp.n_layer : 0, LayerKind::full);
  hp.rope_base.assign(hp.layer_kind.size(), base);
  SIEVE_TRY(read_rope_scaling(f, a, hp));

  SIEVE_TRY(bind_embeddings_and_validate(f, a, hp, w));

  TensorBinder b(f);
  w.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    const LayerBinder lb(b, il);
    SIEVE_TRY(lb.vector("attn_norm.weight", hp.n_embd, L.attn_norm));
    SIEVE_TRY(lb.matrix("attn_q.weight", hp.q_dim(), hp.n_embd, L.wq));
    SIEVE_TRY(lb.matrix("attn_k.weight", hp.kv_dim(), hp.n_embd, L.wk));
    SIEVE_TRY(lb.matrix("attn_v.weight", hp.kv_dim(), hp.n_embd, L.wv));
    if (fam.qkv_bias) {
      SIEVE_TRY(lb.vector("attn_q.bias", hp.q_dim(), L.bq));
      SIEVE_TRY(lb.vector("attn_k.bias", hp.kv_dim(), L.bk));
      SIEVE_TRY(lb.vector("attn_v.bias", hp.kv_dim(), L.bv));
    }
    SIEVE_TRY(lb.matrix("attn_output.weight", hp.n_embd, hp.q_dim(), L.wo));
    SIEVE_TRY(lb.vector("ffn_norm.weight", hp.n_embd, L.ffn_norm));
    SIEVE_TRY(lb.matrix("ffn_gate.weight", hp.n_ff, hp.n_embd, L.w_gate));
    SIEVE_TRY(lb.matrix("ffn_up.weight", hp.n_ff, hp.n_embd, L.w_up));
    SIEVE_TRY(lb.matrix("ffn_down.weight", hp.n_embd, hp.n_ff, L.w_down));
  }
  return {};
}

Status load_llama(const GgufFile& f, ModelHParams& hp, ModelWeights& w) {
  return load_llama_family(f, LlamaFamily{"llama.", RopeMode::norm, 1e-5, 10000.0, false}, hp, w);
}

}  // namespace sieve

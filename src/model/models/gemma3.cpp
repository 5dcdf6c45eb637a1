// Architecture "gemma3" (Gemma 3 text): sandwich norms (before and after attention and FFN),
// per-head QK RMSNorm before RoPE, NEOX RoPE with theta 10,000 on sliding layers and
// rope.freq_base (1e6) on global ones, five sliding-window layers per global layer,
// GeGLU (tanh GELU), embeddings scaled by sqrt(n_embd). The GGUF converter already stores
// (1 + w) for every norm, so norms multiply by the stored weights like llama's.
#include <cmath>

#include "model/model_loader.h"

namespace sieve {

Status load_gemma3(const GgufFile& f, ModelHParams& hp, ModelWeights& w) {
  const std::string a = "gemma3.";
  SIEVE_TRY(read_block_shape(f, a, hp));
  // Gemma's head_dim is not n_embd / n_head (270M: 256 vs 160): the key must be there.
  auto kl = meta_uint(f, a + "attention.key_length");
  if (!kl) return kl.error();
  hp.head_dim = narrow_count(*kl);
  if (meta_uint_or(f, a + "attention.value_length", hp.head_dim) !=
      static_cast<uint64_t>(hp.head_dim)) {
    return make_error("model: gemma3 value_length differs from key_length; not supported");
  }
  hp.n_rot = narrow_count(meta_uint_or(f, a + "rope.dimension_count", hp.head_dim));
  hp.rms_eps = static_cast<float>(meta_float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-6));
  hp.rope_mode = RopeMode::neox;
  hp.act = FfnAct::gelu_tanh;
  hp.qk_norm = true;
  hp.post_norms = true;
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  // query_pre_attn_scalar = head_dim for every size but 27B; a file may say otherwise.
  hp.attn_scale = static_cast<float>(
      meta_float_or(f, a + "attention.scale", 1.0 / std::sqrt(static_cast<double>(hp.head_dim))));
  hp.sliding_window = narrow_count(meta_uint_or(f, a + "attention.sliding_window", 512));
  const float base_global = static_cast<float>(meta_float_or(f, a + "rope.freq_base", 1e6));
  const float base_local = static_cast<float>(meta_float_or(f, a + "rope.freq_base_swa", 1e4));
  if (auto scaling = f.get_string(a + "rope.scaling.type"); scaling && *scaling != "none") {
    return make_error("model: gemma3 rope scaling '{}' is not supported yet", *scaling);
  }
  const int pattern = static_cast<int>(meta_uint_or(f, a + "attention.sliding_window_pattern", 6));
  if (pattern <= 0) return make_error("model: gemma3 sliding_window_pattern must be positive");
  hp.layer_kind.resize(hp.n_layer > 0 ? hp.n_layer : 0);
  hp.rope_base.resize(hp.layer_kind.size());
  for (size_t il = 0; il < hp.layer_kind.size(); ++il) {
    const bool sliding = static_cast<int>(il % pattern) < pattern - 1;
    hp.layer_kind[il] = sliding ? LayerKind::sliding : LayerKind::full;
    hp.rope_base[il] = sliding ? base_local : base_global;
  }
  if (hp.sliding_window <= 0) return make_error("model: gemma3 sliding_window must be positive");

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
    SIEVE_TRY(lb.matrix("attn_output.weight", hp.n_embd, hp.q_dim(), L.wo));
    SIEVE_TRY(lb.vector("attn_q_norm.weight", hp.head_dim, L.q_norm));
    SIEVE_TRY(lb.vector("attn_k_norm.weight", hp.head_dim, L.k_norm));
    SIEVE_TRY(lb.vector("post_attention_norm.weight", hp.n_embd, L.post_attn_norm));
    SIEVE_TRY(lb.vector("ffn_norm.weight", hp.n_embd, L.ffn_norm));
    SIEVE_TRY(lb.matrix("ffn_gate.weight", hp.n_ff, hp.n_embd, L.w_gate));
    SIEVE_TRY(lb.matrix("ffn_up.weight", hp.n_ff, hp.n_embd, L.w_up));
    SIEVE_TRY(lb.matrix("ffn_down.weight", hp.n_embd, hp.n_ff, L.w_down));
    SIEVE_TRY(lb.vector("post_ffw_norm.weight", hp.n_embd, L.post_ffn_norm));
  }
  return {};
}

}  // namespace sieve

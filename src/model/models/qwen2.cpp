// Architecture "qwen2" (Qwen2 / Qwen2.5, incl. Coder): llama's pre-norm blocks (RMSNorm,
// GQA attention, SwiGLU FFN) with biases on the Q, K and V projections, RoPE in NEOX mode
// (the converter does not permute Q/K rows for qwen2), theta 1e6, tied or untied output,
// and no QK-norm. Context extension is YaRN, from rope.scaling.* or the CLI.
#include <cmath>

#include "model/model_loader.h"

namespace sieve {

Status load_qwen2(const GgufFile& f, ModelHParams& hp, ModelWeights& w) {
  const std::string a = "qwen2.";
  for (const char* k : {"block_count", "embedding_length", "attention.head_count",
                        "feed_forward_length", "context_length"}) {
    if (auto r = meta_uint(f, a + k); !r) return r.error();
  }
  hp.n_layer = narrow_count(*f.get_uint(a + "block_count"));
  hp.n_embd = narrow_count(*f.get_uint(a + "embedding_length"));
  hp.n_head = narrow_count(*f.get_uint(a + "attention.head_count"));
  hp.n_ff = narrow_count(*f.get_uint(a + "feed_forward_length"));
  hp.n_ctx_train = narrow_count(*f.get_uint(a + "context_length"));
  hp.n_head_kv = narrow_count(meta_uint_or(f, a + "attention.head_count_kv", hp.n_head));
  hp.head_dim = hp.n_head > 0 ? hp.n_embd / hp.n_head : 0;
  hp.head_dim = narrow_count(meta_uint_or(f, a + "attention.key_length", hp.head_dim));
  hp.n_rot = narrow_count(meta_uint_or(f, a + "rope.dimension_count", hp.head_dim));
  hp.rms_eps = static_cast<float>(meta_float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-6));
  const float base = static_cast<float>(meta_float_or(f, a + "rope.freq_base", 1e6));
  hp.rope_mode = RopeMode::neox;
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
    SIEVE_TRY(lb.vector("attn_q.bias", hp.q_dim(), L.bq));
    SIEVE_TRY(lb.vector("attn_k.bias", hp.kv_dim(), L.bk));
    SIEVE_TRY(lb.vector("attn_v.bias", hp.kv_dim(), L.bv));
    SIEVE_TRY(lb.matrix("attn_output.weight", hp.n_embd, hp.q_dim(), L.wo));
    SIEVE_TRY(lb.vector("ffn_norm.weight", hp.n_embd, L.ffn_norm));
    SIEVE_TRY(lb.matrix("ffn_gate.weight", hp.n_ff, hp.n_embd, L.w_gate));
    SIEVE_TRY(lb.matrix("ffn_up.weight", hp.n_ff, hp.n_embd, L.w_up));
    SIEVE_TRY(lb.matrix("ffn_down.weight", hp.n_embd, hp.n_ff, L.w_down));
  }
  return {};
}

}  // namespace sieve

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
  auto narrow = [](uint64_t v) { return static_cast<int32_t>(std::min<uint64_t>(v, 1u << 30)); };
  for (const char* k : {"block_count", "embedding_length", "attention.head_count",
                        "feed_forward_length", "context_length"}) {
    if (auto r = meta_uint(f, a + k); !r) return r.error();
  }
  hp.n_layer = narrow(*f.get_uint(a + "block_count"));
  hp.n_embd = narrow(*f.get_uint(a + "embedding_length"));
  hp.n_head = narrow(*f.get_uint(a + "attention.head_count"));
  hp.n_ff = narrow(*f.get_uint(a + "feed_forward_length"));
  hp.n_ctx_train = narrow(*f.get_uint(a + "context_length"));
  hp.n_head_kv = narrow(meta_uint_or(f, a + "attention.head_count_kv", hp.n_head));
  // Gemma's head_dim is not n_embd / n_head (270M: 256 vs 160): the key must be there.
  auto kl = meta_uint(f, a + "attention.key_length");
  if (!kl) return kl.error();
  hp.head_dim = narrow(*kl);
  if (meta_uint_or(f, a + "attention.value_length", hp.head_dim) != static_cast<uint64_t>(hp.head_dim)) {
    return make_error("model: gemma3 value_length differs from key_length; not supported");
  }
  hp.n_rot = narrow(meta_uint_or(f, a + "rope.dimension_count", hp.head_dim));
  hp.rms_eps = static_cast<float>(meta_float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-6));
  hp.rope_mode = RopeMode::neox;
  hp.act = FfnAct::gelu_tanh;
  hp.qk_norm = true;
  hp.post_norms = true;
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  // query_pre_attn_scalar = head_dim for every size but 27B; a file may say otherwise.
  hp.attn_scale = static_cast<float>(
      meta_float_or(f, a + "attention.scale", 1.0 / std::sqrt(static_cast<double>(hp.head_dim))));
  hp.sliding_window = narrow(meta_uint_or(f, a + "attention.sliding_window", 512));
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

  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return make_error("model: tensor 'token_embd.weight' is missing from {}", f.path());
  hp.n_vocab = narrow(meta_uint_or(f, a + "vocab_size", static_cast<uint64_t>(emb->ne[1])));
  SIEVE_TRY(validate_hparams(hp));

  TensorBinder b(f);
  auto tok = b.matrix("token_embd.weight", hp.n_vocab, hp.n_embd);
  if (!tok) return tok.error();
  w.tok_embd = *tok;
  hp.tied_output = !b.has("output.weight");
  if (hp.tied_output) {
    w.output = w.tok_embd;
  } else {
    auto out = b.matrix("output.weight", hp.n_vocab, hp.n_embd);
    if (!out) return out.error();
    w.output = *out;
  }
  auto onorm = b.vector("output_norm.weight", hp.n_embd);
  if (!onorm) return onorm.error();
  w.output_norm = *onorm;

  w.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& L = w.layers[il];
    auto m = [&](const char* n, int64_t r, int64_t c, WeightView& dst) -> Status {
      auto v = b.matrix(p + n, r, c);
      if (!v) return v.error();
      dst = *v;
      return {};
    };
    auto v = [&](const char* n, int64_t len, const float*& dst) -> Status {
      auto r = b.vector(p + n, len);
      if (!r) return r.error();
      dst = *r;
      return {};
    };
    SIEVE_TRY(v("attn_norm.weight", hp.n_embd, L.attn_norm));
    SIEVE_TRY(m("attn_q.weight", hp.q_dim(), hp.n_embd, L.wq));
    SIEVE_TRY(m("attn_k.weight", hp.kv_dim(), hp.n_embd, L.wk));
    SIEVE_TRY(m("attn_v.weight", hp.kv_dim(), hp.n_embd, L.wv));
    SIEVE_TRY(m("attn_output.weight", hp.n_embd, hp.q_dim(), L.wo));
    SIEVE_TRY(v("attn_q_norm.weight", hp.head_dim, L.q_norm));
    SIEVE_TRY(v("attn_k_norm.weight", hp.head_dim, L.k_norm));
    SIEVE_TRY(v("post_attention_norm.weight", hp.n_embd, L.post_attn_norm));
    SIEVE_TRY(v("ffn_norm.weight", hp.n_embd, L.ffn_norm));
    SIEVE_TRY(m("ffn_gate.weight", hp.n_ff, hp.n_embd, L.w_gate));
    SIEVE_TRY(m("ffn_up.weight", hp.n_ff, hp.n_embd, L.w_up));
    SIEVE_TRY(m("ffn_down.weight", hp.n_embd, hp.n_ff, L.w_down));
    SIEVE_TRY(v("post_ffw_norm.weight", hp.n_embd, L.post_ffn_norm));
  }
  return {};
}

}  // namespace sieve

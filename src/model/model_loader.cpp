#include "model/model_loader.h"

#include <cmath>

namespace sieve {

Result<WeightView> TensorBinder::matrix(const std::string& name, int64_t n_rows,
                                        int64_t n_cols) const {
  const GgufTensorInfo* t = f_.find_tensor(name);
  if (!t) {
    return make_error("model: tensor '{}' is missing from {}; the file is not a complete model",
                      name, f_.path());
  }
  if (t->n_dims > 2 || t->ne[0] != n_cols || t->ne[1] != n_rows) {
    return make_error("model: tensor '{}' has shape [{}, {}], expected [{}, {}] (ne0, ne1)", name,
                      t->ne[0], t->ne[1], n_cols, n_rows);
  }
  const TypeInfo* ti = type_info(t->type);
  if (!ti || !ti->supported) {
    return make_error(
        "model: tensor '{}' has type {}, which Sieve does not support yet (supported: F32, F16, "
        "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K); requantize the model",
        name, ti ? ti->name : std::string_view("unknown"));
  }
  WeightView w;
  w.type = t->type;
  w.data = f_.tensor_data(*t);
  w.n_rows = n_rows;
  w.n_cols = n_cols;
  return w;
}

Result<const float*> TensorBinder::vector(const std::string& name, int64_t n) const {
  const GgufTensorInfo* t = f_.find_tensor(name);
  if (!t) return make_error("model: tensor '{}' is missing from {}", name, f_.path());
  if (t->n_elements() != n || t->type != GgmlType::F32) {
    return make_error("model: tensor '{}' is {} with {} elements, expected F32 with {}", name,
                      type_name(t->type), t->n_elements(), n);
  }
  return reinterpret_cast<const float*>(f_.tensor_data(*t));
}

Status LayerBinder::matrix(const char* name, int64_t n_rows, int64_t n_cols,
                           WeightView& dst) const {
  auto v = b_.matrix(prefix_ + name, n_rows, n_cols);
  if (!v) return v.error();
  dst = *v;
  return {};
}

Status LayerBinder::vector(const char* name, int64_t n, const float*& dst) const {
  auto v = b_.vector(prefix_ + name, n);
  if (!v) return v.error();
  dst = *v;
  return {};
}

Status bind_embeddings_and_validate(const GgufFile& f, const std::string& a, ModelHParams& hp,
                                    ModelWeights& w) {
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return make_error("model: tensor 'token_embd.weight' is missing from {}", f.path());
  hp.n_vocab = narrow_count(meta_uint_or(f, a + "vocab_size", static_cast<uint64_t>(emb->ne[1])));
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
  return {};
}

Result<uint64_t> meta_uint(const GgufFile& f, const std::string& key) {
  auto v = f.get_uint(key);
  if (!v) {
    if (f.find(key)) return make_error("model: metadata '{}' is not an unsigned integer", key);
    return make_error("model: metadata '{}' is missing from {}", key, f.path());
  }
  return *v;
}

uint64_t meta_uint_or(const GgufFile& f, const std::string& key, uint64_t fallback) {
  auto v = f.get_uint(key);
  return v ? *v : fallback;
}

double meta_float_or(const GgufFile& f, const std::string& key, double fallback) {
  auto v = f.get_float(key);
  return v ? *v : fallback;
}

Status read_block_shape(const GgufFile& f, const std::string& a, ModelHParams& hp) {
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
  return {};
}

Status read_rope_scaling(const GgufFile& f, const std::string& a, ModelHParams& hp) {
  RopeScaling s;
  std::string type = "none";
  if (f.find(a + "rope.scaling.type")) {
    auto t = f.get_string(a + "rope.scaling.type");
    if (!t) return make_error("model: metadata '{}rope.scaling.type' is not a string", a);
    type = std::string(*t);
  }
  double factor = meta_float_or(f, a + "rope.scaling.factor", 0.0);
  if (factor == 0.0) {
    // Older files: a linear scale without a type (llama.cpp reads it the same way).
    const double lin = meta_float_or(f, a + "rope.scale_linear", 0.0);
    if (lin != 0.0 && lin != 1.0 && type == "none") type = "linear";
    factor = lin;
  }
  if (type == "none") return set_rope_scaling(hp, s);
  if (type == "linear") {
    s.type = RopeScalingType::linear;
  } else if (type == "yarn") {
    s.type = RopeScalingType::yarn;
  } else {
    return make_error(
        "model: rope scaling '{}' ({}rope.scaling.type) is not supported (none, linear, yarn)",
        type, a);
  }
  if (meta_float_or(f, a + "rope.scaling.yarn_log_multiplier", 0.0) != 0.0) {
    return make_error(
        "model: {}rope.scaling.yarn_log_multiplier (DeepSeek-style YaRN) is not supported", a);
  }
  s.factor = static_cast<float>(factor == 0.0 ? 1.0 : factor);
  s.n_ctx_orig = narrow_count(meta_uint_or(f, a + "rope.scaling.original_context_length",
                                           static_cast<uint64_t>(hp.n_ctx_train)));
  s.ext_factor = static_cast<float>(meta_float_or(f, a + "rope.scaling.yarn_ext_factor",
                                                  s.type == RopeScalingType::yarn ? 1.0 : 0.0));
  s.attn_factor = static_cast<float>(meta_float_or(f, a + "rope.scaling.attn_factor", 1.0));
  s.beta_fast = static_cast<float>(meta_float_or(f, a + "rope.scaling.yarn_beta_fast", 32.0));
  s.beta_slow = static_cast<float>(meta_float_or(f, a + "rope.scaling.yarn_beta_slow", 1.0));
  return set_rope_scaling(hp, s);
}

Status set_rope_scaling(ModelHParams& hp, const RopeScaling& s) {
  if (hp.attn_scale_unscaled == 0) hp.attn_scale_unscaled = hp.attn_scale;
  if (s.type != RopeScalingType::none) {
    if (!(s.factor > 0) || !std::isfinite(s.factor)) {
      return make_error("model: rope scaling factor {} must be positive", s.factor);
    }
    if (s.type == RopeScalingType::yarn) {
      if (s.n_ctx_orig <= 0)
        return make_error("model: YaRN needs the original context length (> 0)");
      if (!(s.beta_fast > 0) || !(s.beta_slow > 0)) {
        return make_error("model: YaRN beta_fast {} and beta_slow {} must be positive", s.beta_fast,
                          s.beta_slow);
      }
    }
    if (!(s.attn_factor > 0) || !std::isfinite(s.ext_factor)) {
      return make_error("model: rope scaling attn_factor {} must be positive", s.attn_factor);
    }
  }
  hp.rope_scaling = s;
  if (s.type == RopeScalingType::none) hp.rope_scaling = RopeScaling{};
  const float m = hp.rope_scaling.mscale();
  hp.attn_scale = hp.attn_scale_unscaled * m * m;
  return {};
}

Status validate_hparams(const ModelHParams& hp) {
  auto bad = [&](const char* what, int64_t v) {
    return make_error("model: {} = {} is not valid for architecture {}", what, v, hp.arch);
  };
  if (hp.n_layer <= 0 || hp.n_layer > 4096) return bad("block_count", hp.n_layer);
  if (hp.n_embd <= 0 || hp.n_embd > (1 << 16)) return bad("embedding_length", hp.n_embd);
  if (hp.n_head <= 0 || hp.n_head > 1024) return bad("attention.head_count", hp.n_head);
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    return bad("attention.head_count_kv", hp.n_head_kv);
  if (hp.head_dim <= 0 || hp.head_dim > 1024 || hp.head_dim % 2 != 0)
    return bad("attention.key_length", hp.head_dim);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    return bad("rope.dimension_count", hp.n_rot);
  if (hp.n_ff <= 0) return bad("feed_forward_length", hp.n_ff);
  if (hp.n_vocab <= 0) return bad("vocab_size", hp.n_vocab);
  if (hp.n_ctx_train <= 0) return bad("context_length", hp.n_ctx_train);
  if (static_cast<int32_t>(hp.layer_kind.size()) != hp.n_layer ||
      static_cast<int32_t>(hp.rope_base.size()) != hp.n_layer)
    return make_error("model: per-layer tables do not cover {} layers", hp.n_layer);
  for (float b : hp.rope_base) {
    if (!(b > 1.0f) || !std::isfinite(b)) return bad("rope.freq_base", static_cast<int64_t>(b));
  }
  if (!(hp.rms_eps > 0) || !(hp.attn_scale > 0)) return bad("layer_norm_rms_epsilon", 0);
  return {};
}

}  // namespace sieve

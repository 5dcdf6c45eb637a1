#include "model/model.h"

#include "core/log.h"
#include "model/model_loader.h"

namespace sieve {
namespace {

struct ArchEntry {
  const char* name;
  Status (*load)(const GgufFile&, ModelHParams&, ModelWeights&);
};

constexpr ArchEntry kArchs[] = {
    {"llama", load_llama},
    {"gemma3", load_gemma3},
    {"qwen2", load_qwen2},
};

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> v;
  for (const auto& a : kArchs) v.emplace_back(a.name);
  return v;
}

Result<std::unique_ptr<Model>> load_model(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file) return file.error();
  auto model = std::make_unique<Model>();
  model->file = std::move(file.value());
  const GgufFile& f = *model->file;

  auto arch = f.get_string("general.architecture");
  if (!arch) {
    return make_error("model: {} has no 'general.architecture' string; not a model file?", path);
  }
  const ArchEntry* entry = nullptr;
  for (const auto& a : kArchs) {
    if (*arch == a.name) entry = &a;
  }
  if (!entry) {
    std::string names;
    for (const auto& a : kArchs) names += names.empty() ? a.name : std::string(", ") + a.name;
    return make_error("model: architecture '{}' of {} is not supported (supported: {})", *arch,
                      path, names);
  }
  model->hp.arch = std::string(*arch);
  if (auto n = f.get_string("general.name")) model->hp.name = std::string(*n);
  SIEVE_TRY(entry->load(f, model->hp, model->w));
  if (model->hp.attn_scale_unscaled == 0) model->hp.attn_scale_unscaled = model->hp.attn_scale;

  auto tok = Tokenizer::from_gguf(f);
  if (!tok) return tok.error();
  model->tokenizer = std::move(tok.value());
  if (model->tokenizer->n_vocab() < model->hp.n_vocab) {
    return make_error("model: tokenizer has {} tokens but the embedding has {} rows",
                      model->tokenizer->n_vocab(), model->hp.n_vocab);
  }
  log_debug("loaded {} ({}): {} layers, n_embd {}, heads {}/{}, head_dim {}, ctx {}",
            model->hp.name, model->hp.arch, model->hp.n_layer, model->hp.n_embd, model->hp.n_head,
            model->hp.n_head_kv, model->hp.head_dim, model->hp.n_ctx_train);
  return model;
}

}  // namespace sieve

// Test-only: loads the real models' tokenizers once per test binary.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "gguf/gguf_file.h"
#include "gguf/test_models.h"
#include "model/tokenizer.h"

namespace sieve {

// nullptr when the model file is absent (the caller skips); a load error fails loudly.
inline const Tokenizer* test_tokenizer(const char* file_name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  if (auto it = cache.find(file_name); it != cache.end()) return it->second.get();
  const std::string path = test_model_path(file_name);
  if (path.empty()) return nullptr;
  auto f = GgufFile::open(path);
  if (!f.ok()) throw std::runtime_error(f.message());
  auto t = Tokenizer::from_gguf(**f);
  if (!t.ok()) throw std::runtime_error(t.message());
  return (cache[file_name] = std::move(*t)).get();
}

}  // namespace sieve

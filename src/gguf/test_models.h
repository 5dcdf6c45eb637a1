// Where tests find the real models (SmolLM2-135M, Gemma-3-270M): the first directory of
// $SIEVE_TEST_MODEL_DIR, $SIEVE_HOME/models, ~/.cache/sieve/models and /tmp/models that holds
// the file. Tests GTEST_SKIP() with the reason when the model is absent. Test-only.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace sieve {

// Full path of the model file `name` (e.g. "smollm2.gguf"), or "" when no directory has it.
inline std::string test_model_path(const char* name) {
  namespace fs = std::filesystem;
  std::string dirs[4];
  if (const char* d = std::getenv("SIEVE_TEST_MODEL_DIR"); d && *d) dirs[0] = d;
  if (const char* h = std::getenv("SIEVE_HOME"); h && *h) dirs[1] = std::string(h) + "/models";
  if (const char* h = std::getenv("HOME"); h && *h)
    dirs[2] = std::string(h) + "/.cache/sieve/models";
  dirs[3] = "/tmp/models";
  for (const std::string& dir : dirs) {
    if (dir.empty()) continue;
    const fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

}  // namespace sieve

